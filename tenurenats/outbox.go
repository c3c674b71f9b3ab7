package tenurenats

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/tenurenats/internal/natsdb"
)

// MaxPayloadBytes bounds an outbox message's payload (1 MiB, the NATS server's default
// max_payload). The table accepts up to 8 MiB for servers configured higher; Publish refuses
// more than this so a row the relay can never publish is not written.
const MaxPayloadBytes = 1 << 20

// maxHeaderBytes bounds the JSON encoding of a message's headers.
const maxHeaderBytes = 64 << 10

// PublishOpts are the optional parts of an outbox message.
type PublishOpts struct {
	// MsgID is the message's Nats-Msg-Id: JetStream drops a second message with the same id
	// inside the stream's duplicate window. Default: a new random UUID, so each Publish is
	// one message. Set it to a business key (an order id and event name) to also collapse
	// repeated Publish calls of the same event; it must be unique in tenure.outbox (a second
	// Publish with a pending or retained id fails with a unique violation in the transaction).
	MsgID string
	// Headers are sent with the message. Names starting with "Nats-" are reserved for the
	// relay (Nats-Msg-Id) and refused.
	Headers map[string][]string
	// Schema is the PostgreSQL schema whose outbox (S.outbox) the message is written to: the
	// schema Tenure was migrated into (migrations.Options.Schema; docs/guide.md, "A schema of
	// your own"), the one the relay reads (RelayConfig.Schema). Default "tenure". An invalid
	// name is refused with a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
	Schema string
}

// Publish writes one message for subject into the outbox, in tx: the message exists if and
// only if tx commits, and a Relay publishes it to JetStream afterwards. It returns the row's
// id. Invalid input is refused before anything is written, with ErrInvalidSubject,
// ErrInvalidMessage or, for opts.Schema, migrations.ErrInvalidSchema.
func Publish(ctx context.Context, tx pgx.Tx, subject string, payload []byte, opts *PublishOpts) (int64, error) {
	var o PublishOpts
	if opts != nil {
		o = *opts
	}
	sch, err := dbschema.New(o.Schema)
	if err != nil {
		return 0, err
	}
	if err := checkSubject(subject); err != nil {
		return 0, err
	}
	if len(payload) > MaxPayloadBytes {
		return 0, fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrInvalidMessage, len(payload), MaxPayloadBytes)
	}
	if o.MsgID == "" {
		o.MsgID = uuid.NewString()
	}
	if len(o.MsgID) > 200 || !utf8.ValidString(o.MsgID) || strings.IndexByte(o.MsgID, 0) >= 0 {
		return 0, fmt.Errorf("%w: message id must be 1..200 bytes of valid UTF-8 without NUL", ErrInvalidMessage)
	}
	hdr, err := encodeHeaders(o.Headers)
	if err != nil {
		return 0, err
	}
	if payload == nil {
		payload = []byte{}
	}
	return natsdb.New(sch.Wrap(tx)).OutboxInsert(ctx, natsdb.OutboxInsertParams{MsgID: o.MsgID, Subject: subject, Payload: payload, Headers: hdr})
}

func encodeHeaders(h map[string][]string) ([]byte, error) {
	if len(h) == 0 {
		return []byte("{}"), nil
	}
	for k, vs := range h {
		if k == "" || strings.HasPrefix(strings.ToLower(k), "nats-") {
			return nil, fmt.Errorf("%w: header name %q is empty or reserved", ErrInvalidMessage, k)
		}
		if !validHeaderText(k) || strings.ContainsAny(k, ": ") {
			return nil, fmt.Errorf("%w: header name %q", ErrInvalidMessage, k)
		}
		for _, v := range vs {
			if !validHeaderText(v) {
				return nil, fmt.Errorf("%w: header %q has a value with NUL, a line break or invalid UTF-8", ErrInvalidMessage, k)
			}
		}
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("%w: headers: %v", ErrInvalidMessage, err)
	}
	if len(raw) > maxHeaderBytes {
		return nil, fmt.Errorf("%w: headers encode to %d bytes, limit %d", ErrInvalidMessage, len(raw), maxHeaderBytes)
	}
	return raw, nil
}

func validHeaderText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\r\n")
}

// checkSubject accepts a subject a message can be published to.
func checkSubject(s string) error {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %q must be 1..255 bytes of valid UTF-8", ErrInvalidSubject, s)
	}
	for _, tok := range strings.Split(s, ".") {
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrInvalidSubject, s, err)
		}
	}
	return nil
}

func checkToken(tok string) error {
	if tok == "" {
		return fmt.Errorf("empty token")
	}
	if tok == "*" || tok == ">" {
		return fmt.Errorf("wildcard token %q", tok)
	}
	for _, r := range tok {
		if unicode.IsSpace(r) || r == 0 || r == '.' || r == '*' || r == '>' {
			return fmt.Errorf("token %q contains %q", tok, r)
		}
	}
	return nil
}
