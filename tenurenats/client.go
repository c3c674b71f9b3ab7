package tenurenats

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
)

// Headers of a job message. The payload is the message body (the args' strict JSON encoding,
// as in tenure.jobs.payload).
const (
	HeaderKind           = "Tenure-Kind"            // the job kind
	HeaderVersion        = "Tenure-Payload-Version" // the payload version (decimal)
	HeaderMaxAttempts    = "Tenure-Max-Attempts"    // the job's attempt budget (decimal)
	HeaderMetadata       = "Tenure-Metadata"        // jobs.InsertOpts.Metadata as a JSON object
	HeaderErrorCode      = "Tenure-Error-Code"      // dead letters: the last error's code
	HeaderError          = "Tenure-Error"           // dead letters: the last error's message (one line, at most 2,000 bytes)
	HeaderAttempts       = "Tenure-Attempts"        // dead letters: deliveries made
	HeaderSourceSeq      = "Tenure-Source-Sequence" // dead letters: the job's stream sequence (its id)
	HeaderSource         = "Tenure-Source-Stream"   // dead letters: the job's stream
	DefaultSubjectPrefix = "tenure.jobs"
)

// ClientConfig configures a Client. The zero value works.
type ClientConfig struct {
	// SubjectPrefix: a job of kind K is published to "<SubjectPrefix>.<K>". Default
	// "tenure.jobs". A stream must capture these subjects (e.g. "tenure.jobs.>").
	SubjectPrefix string
	// Stream, when set, makes each direct publish (Insert) carry Nats-Expected-Stream, so a
	// subject no stream (or another stream) captures fails. Default "": no check.
	Stream string
	// Registry, when set, makes enqueue strict as in jobs.Config: unregistered kinds are
	// refused with generics.ErrUnknownKind, a version other than the registered one with
	// generics.ErrUnsupportedVersion, and the kind's registered MaxAttempts applies. Pass
	// the JetStream worker's registry (Worker.Registry) or a jobs/worker one.
	Registry *generics.Registry
	// MaxPayloadBytes bounds an encoded payload. Default generics.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// BeforeInsert is jobs.Config.BeforeInsert: called per job before validation with a copy
	// of its options (the seam tenureotel uses to add a trace context).
	BeforeInsert func(ctx context.Context, kind string, opts *jobs.InsertOpts)
	// Schema is the PostgreSQL schema whose outbox InsertTx writes to (PublishOpts.Schema):
	// the one Tenure was migrated into and the Relay reads (RelayConfig.Schema). Default
	// "tenure". An invalid name is refused by NewClient with ErrInvalidConfig and a
	// *migrations.InvalidSchemaError (migrations.ErrInvalidSchema). Insert, which publishes
	// directly, does not use it.
	Schema string
}

// Client enqueues typed jobs on JetStream, directly (Insert) or through the transactional
// outbox (InsertTx). It validates exactly what jobs.Client validates. Safe for concurrent use.
type Client struct {
	js  jetstream.JetStream
	cfg ClientConfig
}

// NewClient returns a client publishing through js (which may be nil for a client that only
// uses InsertTx).
func NewClient(js jetstream.JetStream, cfg *ClientConfig) (*Client, error) {
	var c ClientConfig
	if cfg != nil {
		c = *cfg
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if err := checkSubject(c.SubjectPrefix); err != nil {
		return nil, fmt.Errorf("%w: SubjectPrefix: %v", ErrInvalidConfig, err)
	}
	if c.MaxPayloadBytes <= 0 {
		c.MaxPayloadBytes = generics.DefaultMaxPayloadBytes
	}
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	c.Schema = sch.Name()
	return &Client{js: js, cfg: c}, nil
}

// Subject returns the subject jobs of kind are published to.
func (c *Client) Subject(kind string) string { return c.cfg.SubjectPrefix + "." + kind }

// InsertResult is a job published to JetStream.
type InsertResult struct {
	// Stream and Sequence locate the message; Sequence is the job's id (generics.Job.ID).
	Stream   string
	Sequence uint64
	// MsgID is the message's Nats-Msg-Id.
	MsgID string
	// Duplicate is true when JetStream already had a message with MsgID (within its
	// duplicate window) and dropped this one.
	Duplicate bool
}

// Insert validates args and opts like jobs.Client.Insert and publishes the job to JetStream,
// waiting for the stream's acknowledgement. opts.MsgID is not a jobs.InsertOpts field: use
// InsertWithID to set the message id (default: a random UUID). RunAt and Delay are refused
// (*jobs.OptionError): JetStream has no scheduled delivery here. MaxAttempts defaults to the
// args type's declared one (generics.ArgsWithDefaults), then the registry's. Queue, Priority
// and Lease are accepted and ignored: a consumer's AckWait is the lease (HandlerOptions.Lease) and
// JetStream has no priorities.
func Insert[A generics.Args](ctx context.Context, c *Client, args A, opts *jobs.InsertOpts) (*InsertResult, error) {
	return InsertWithID(ctx, c, args, opts, "")
}

// InsertWithID is Insert with the message's Nats-Msg-Id set to msgID ("" for a random UUID):
// a second insert with the same id within the stream's duplicate window is dropped by
// JetStream (InsertResult.Duplicate).
func InsertWithID[A generics.Args](ctx context.Context, c *Client, args A, opts *jobs.InsertOpts, msgID string) (*InsertResult, error) {
	if c.js == nil {
		return nil, fmt.Errorf("%w: client has no JetStream connection (use InsertTx)", ErrInvalidConfig)
	}
	subject, payload, hdr, err := c.prepare(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	if msgID == "" {
		msgID = uuid.NewString()
	}
	m := nats.NewMsg(subject)
	m.Data, m.Header = payload, hdr
	popts := []jetstream.PublishOpt{jetstream.WithMsgID(msgID)}
	if c.cfg.Stream != "" {
		popts = append(popts, jetstream.WithExpectStream(c.cfg.Stream))
	}
	ack, err := c.js.PublishMsg(ctx, m, popts...)
	if err != nil {
		return nil, err
	}
	return &InsertResult{Stream: ack.Stream, Sequence: ack.Sequence, MsgID: msgID, Duplicate: ack.Duplicate}, nil
}

// InsertTx validates args and opts like Insert and writes the job into the outbox of the
// client's schema (ClientConfig.Schema) in tx (Publish): the job exists if and only if tx
// commits, and a Relay publishes it. It returns the outbox row's id.
func InsertTx[A generics.Args](ctx context.Context, tx pgx.Tx, c *Client, args A, opts *jobs.InsertOpts) (int64, error) {
	subject, payload, hdr, err := c.prepare(ctx, args, opts)
	if err != nil {
		return 0, err
	}
	return Publish(ctx, tx, subject, payload, &PublishOpts{Headers: hdr, Schema: c.cfg.Schema})
}

func (c *Client) prepare(ctx context.Context, args generics.Args, opts *jobs.InsertOpts) (string, []byte, nats.Header, error) {
	if args == nil {
		return "", nil, nil, &jobs.OptionError{Field: "args", Msg: "must not be nil"}
	}
	kind := args.Kind()
	if err := checkKindToken(kind); err != nil {
		return "", nil, nil, err
	}
	var o jobs.InsertOpts
	if opts != nil {
		o = *opts
	}
	if c.cfg.BeforeInsert != nil {
		o.Metadata = maps.Clone(o.Metadata)
		c.cfg.BeforeInsert(ctx, kind, &o)
	}
	// The args type's declared defaults first, then the registry's (as jobs.Client).
	if d, ok := generics.DefaultsOf(args); ok && o.MaxAttempts == 0 {
		o.MaxAttempts = d.MaxAttempts
	}
	if c.cfg.Registry != nil {
		info, ok := c.cfg.Registry.Lookup(kind)
		if !ok {
			return "", nil, nil, fmt.Errorf("%w: %q", generics.ErrUnknownKind, kind)
		}
		if info.Version != args.PayloadVersion() {
			return "", nil, nil, &generics.PayloadError{Kind: kind, Version: args.PayloadVersion(), Reason: generics.ErrUnsupportedVersion,
				Err: fmt.Errorf("registered version is %d", info.Version)}
		}
		if o.MaxAttempts == 0 {
			o.MaxAttempts = info.Defaults.MaxAttempts
		}
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = jobs.DefaultMaxAttempts
	}
	switch {
	case o.MaxAttempts < 1 || o.MaxAttempts > 1000:
		return "", nil, nil, &jobs.OptionError{Field: "MaxAttempts", Msg: fmt.Sprintf("%d is outside 1..1000", o.MaxAttempts)}
	case !o.RunAt.IsZero():
		return "", nil, nil, &jobs.OptionError{Field: "RunAt", Msg: "scheduled jobs are not supported on JetStream"}
	case o.Delay != 0:
		return "", nil, nil, &jobs.OptionError{Field: "Delay", Msg: "delayed jobs are not supported on JetStream"}
	case o.Priority < 0 || o.Priority > jobs.PriorityMax:
		return "", nil, nil, &jobs.OptionError{Field: "Priority", Msg: fmt.Sprintf("%d is outside 1..%d", o.Priority, jobs.PriorityMax)}
	}
	meta, err := jobs.EncodeMetadata(o.Metadata)
	if err != nil {
		return "", nil, nil, err
	}
	payload, err := generics.Encode(args, c.cfg.MaxPayloadBytes)
	if err != nil {
		return "", nil, nil, err
	}
	hdr := nats.Header{}
	hdr.Set(HeaderKind, kind)
	hdr.Set(HeaderVersion, strconv.Itoa(args.PayloadVersion()))
	hdr.Set(HeaderMaxAttempts, strconv.Itoa(o.MaxAttempts))
	if len(o.Metadata) > 0 {
		hdr.Set(HeaderMetadata, string(meta))
	}
	return c.Subject(kind), payload, hdr, nil
}

// checkKindToken accepts a kind that can be one subject token and part of a consumer name.
func checkKindToken(kind string) error {
	if err := checkToken(kind); err != nil || strings.ContainsAny(kind, "/\\") || len(kind) > 128 {
		return fmt.Errorf("%w: %q", ErrKindNotSubjectToken, kind)
	}
	return nil
}
