package generics

import (
	"errors"
	"fmt"
)

// ErrPayloadTooLarge means the encoded args exceed the configured limit (default 64 KiB).
// Large bodies belong in object storage, referenced from the args.
var ErrPayloadTooLarge = errors.New("tenure: payload too large")

// ErrInvalidPayload means the payload could not be encoded or decoded strictly (unknown
// fields, trailing data, wrong JSON types, not an object) or failed Validate.
var ErrInvalidPayload = errors.New("tenure: invalid payload")

// ErrUnsupportedVersion means a payload's version is newer than the running code knows,
// below 1, or older with no registered upgrader path to the current version.
var ErrUnsupportedVersion = errors.New("tenure: unsupported payload version")

// ErrNULCharacter means a string in the args (a value or a map key) contains the NUL character
// U+0000, which a PostgreSQL jsonb value cannot hold (SQLSTATE 22P05). Encode rejects it, wrapped
// in a *PayloadError whose Reason is ErrInvalidPayload and whose Path names the field.
var ErrNULCharacter = errors.New("tenure: string contains a NUL character (U+0000)")

// ErrInvalidUTF8 means a string in the args (a value or a map key) is not valid UTF-8.
// encoding/json would silently replace the bad bytes with U+FFFD, so the stored payload would
// differ from the args; Encode rejects it instead, wrapped in a *PayloadError whose Reason is
// ErrInvalidPayload and whose Path names the field.
var ErrInvalidUTF8 = errors.New("tenure: string is not valid UTF-8")

// ErrUnknownKind means the kind is not registered with the registry in use.
var ErrUnknownKind = errors.New("tenure: unknown job kind")

// ErrDuplicateKind means a kind was registered twice with different types.
var ErrDuplicateKind = errors.New("tenure: duplicate job kind")

// PayloadError describes why a payload was rejected. It wraps one of the sentinel errors above
// (match with errors.Is) and the underlying cause, if any.
type PayloadError struct {
	Kind    string
	Version int   // the payload's version (stored or declared)
	Reason  error // one of the sentinels
	Err     error // the cause, may be nil
	// Path locates the offending value in the encoded JSON object when it is known, e.g.
	// `items[2].name` or `tags["k"]` (JSON names, not Go field names); "" otherwise.
	Path string
}

func (e *PayloadError) Error() string {
	msg := fmt.Sprintf("%v: kind %q version %d", e.Reason, e.Kind, e.Version)
	if e.Path != "" {
		msg += ": field " + e.Path
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes both the sentinel and the cause to errors.Is / errors.As.
func (e *PayloadError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// FieldError is returned by generated Validate methods: it names the offending field.
type FieldError struct {
	Field string
	Rule  string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Msg) }

// ErrDeleteOnSuccessUnique means a kind declares both delete on success
// (KindDefaults.DeleteOnSuccess, worker.HandlerOptions.DeleteOnSuccess) and uniqueness that
// holds the key in the succeeded state (UniqueDefaults.States with "succeeded"): the deleted
// row could not hold the key. worker.Register refuses the combination (docs/guide.md §28); a
// per-insert unique option over succeeded keeps its job's row instead.
var ErrDeleteOnSuccessUnique = errors.New("tenure: delete on success cannot keep a unique key in the succeeded state")
