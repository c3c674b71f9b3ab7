package generics

import (
	"errors"
	"fmt"
	"time"
)

// The limits below are the one definition of every bound Tenure puts on what a job carries.
// The database holds the same numbers in the SQL function tenure.limit(name) (db/schema.sql),
// which its constraints and tenure.enqueue use; TestLimitsMatchTheDatabase (package jobs) fails
// when the two disagree, and TestLimitBoundaries walks each bound on every path that writes it.
//
// Every JSON bound is measured the same way on both sides: the number of bytes of the value's
// text as PostgreSQL renders a jsonb (`octet_length(value::text)`, SQL function
// tenure.json_size), which JSONSize computes in Go without a round trip. That measure does not
// depend on the storage format (pg_column_size of a jsonb can be several times its text: a
// 14 KB array of small integers takes more than 32 KB stored), so a value Go accepts is a value
// the database accepts.
const (
	// MaxArgsBytes bounds a job's args (its payload), as jsonb text: 64 KiB. A jobs.Config
	// may lower it (MaxPayloadBytes), never raise it; tenure.enqueue applies it too.
	MaxArgsBytes = 64 << 10
	// MaxOutputBytes bounds what a handler records with worker.SetOutput, as jsonb text: 16 KiB.
	MaxOutputBytes = 16 << 10
	// MaxEffectResultBytes bounds an effect's recorded result, as jsonb text: 64 KiB.
	MaxEffectResultBytes = 64 << 10
	// MaxMetadataBytes bounds a job's metadata object, as jsonb text: 4 KiB.
	MaxMetadataBytes = 4 << 10
	// MaxMetadataEntries bounds the number of metadata entries.
	MaxMetadataEntries = 64
	// MaxMetadataKeyBytes bounds a metadata key, in bytes.
	MaxMetadataKeyBytes = 128
	// MaxTags bounds the number of tags of a job.
	MaxTags = 16
	// MaxTagBytes bounds one tag: 1..64 characters of [A-Za-z0-9_.:/=+-], starting with a
	// letter or digit.
	MaxTagBytes = 64
	// MaxKindChars and MaxQueueChars bound a kind and a queue name, in characters.
	MaxKindChars  = 128
	MaxQueueChars = 128
	// MaxErrorMessageBytes bounds one error message kept in a job's error history.
	MaxErrorMessageBytes = 2000
	// MaxErrorHistory is how many error messages a job keeps (the most recent).
	MaxErrorHistory = 10
	// MaxNameChars bounds an effect's name and an operator's actor name, in characters.
	MaxNameChars = 200
	// MaxReasonChars bounds an operator action's reason, in characters.
	MaxReasonChars = 2000
	// MaxJSONDepth bounds the nesting of arrays and objects in a JSON value Go writes:
	// encoding/json cannot decode deeper values, so no handler could read them. Go refuses
	// them (ErrJSONTooDeep); a value written by SQL is bounded by PostgreSQL's own parser, and
	// a handler that cannot decode it fails the job permanently (INVALID_PAYLOAD).
	MaxJSONDepth = 10000
)

// The window every job timestamp falls in (run_at, and the times the engine writes): from
// MinJobTime (the Unix epoch) up to, not including, MaxJobTime (2200-01-01 UTC). The database
// refuses anything else on every path (domain tenure.job_time), so every reader can turn any
// two of a job's times into a time.Duration without overflow.
var (
	MinJobTime = time.Unix(0, 0).UTC()
	MaxJobTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ErrJSONTooDeep means a JSON value nests arrays and objects deeper than MaxJSONDepth.
var ErrJSONTooDeep = errors.New("tenure: JSON nested too deeply")

// ErrInvalidJSON means a value is not JSON that a PostgreSQL jsonb can hold as given: bad
// syntax, an unpaired UTF-16 surrogate escape, or a number outside numeric's range. NUL
// characters and invalid UTF-8 are reported as ErrNULCharacter and ErrInvalidUTF8.
var ErrInvalidJSON = errors.New("tenure: not JSON a jsonb can hold")

// ErrTooLarge means a value is larger than its limit (see LimitError).
var ErrTooLarge = errors.New("tenure: value too large")

// LimitError says which limit a value broke: errors.Is(err, ErrTooLarge).
type LimitError struct {
	What  string // "args", "output", "effect result", "metadata", ...
	Size  int    // the value's size in the limit's unit
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: %s is %d bytes as jsonb text, at most %d allowed", ErrTooLarge, e.What, e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *LimitError) Unwrap() error { return ErrTooLarge }

// CheckJSON measures raw with JSONSize and refuses it when it is not storable or larger than
// limit bytes of jsonb text (a *LimitError naming what).
func CheckJSON(what string, raw []byte, limit int) error {
	n, err := JSONSize(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n > limit {
		return &LimitError{What: what, Size: n, Limit: limit}
	}
	return nil
}
