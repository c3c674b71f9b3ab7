package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/jobrow"
)

// UniqueOpts makes a job unique: while a job with the same unique key is in one of the key's
// states, inserting another returns that job instead (InsertResult.Duplicate).
// The key always includes the kind; ByArgs, ByQueue and ByPeriod add to it. The database
// enforces it (a unique partial index on the key, see docs/guide.md "Unique jobs"), so it
// holds across processes and under any concurrency.
//
// The zero UniqueOpts (&UniqueOpts{}) means "at most one ready or running job of this kind".
type UniqueOpts struct {
	// ByArgs adds the encoded args to the key: all fields, or only Fields when set.
	ByArgs bool
	// Fields, when not empty, restricts ByArgs (which it implies) to these top-level JSON
	// field names, as encoded (the json tag's name). Each must be present in the encoded
	// args, or the insert is refused (an omitempty field left empty is absent: name only fields
	// that are always encoded). At most MaxUniqueFields.
	Fields []string
	// ByQueue adds the queue to the key, so the same job may wait in two queues at once.
	ByQueue bool
	// ByPeriod, when > 0 (at least a second), adds the period window the insert falls in to
	// the key: windows are whole multiples of ByPeriod since the Unix epoch, on the database
	// clock (the time of the inserting transaction). With generics.JobStateSucceeded in States it means
	// "at most one run per window".
	ByPeriod time.Duration
	// States lists the states, besides generics.JobStateReady and generics.JobStateRunning (which always hold the
	// key), in which a job keeps its key: any of generics.JobStateSucceeded, generics.JobStateDead, generics.JobStateCancelled.
	// Default none: a job frees its key when it finishes, dies or is cancelled.
	States []generics.JobState
}

// MaxUniqueFields bounds UniqueOpts.Fields.
const MaxUniqueFields = 32

// InsertResult is the result of inserting one job: Insert and InsertTx return one, InsertMany
// and InsertManyTx one per job in input order.
type InsertResult struct {
	// Job is the stored row: the inserted job, or when Duplicate the job that held the key.
	Job *generics.JobRow
	// Duplicate reports that the job was unique and another job held its key (a stored job,
	// or an earlier job of the same InsertMany call): nothing was inserted, and Job is that
	// other job.
	Duplicate bool
}

// ErrUniqueConflict means an operator action (Reinject, Retry) would move a unique job back
// into ready while another job holds its unique key (it was inserted after this one finished,
// died or was cancelled). Nothing changed. The error is a *UniqueConflictError.
var ErrUniqueConflict = errors.New("tenure: another job holds the unique key")

// UniqueConflictError names the job holding the key.
type UniqueConflictError struct {
	ID       int64 // the job the action was for
	HolderID int64 // the job holding its key; 0 if it could not be told
}

func (e *UniqueConflictError) Error() string {
	if e.HolderID == 0 {
		return fmt.Sprintf("%v: job %d", ErrUniqueConflict, e.ID)
	}
	return fmt.Sprintf("%v: job %d's key is held by job %d", ErrUniqueConflict, e.ID, e.HolderID)
}
func (e *UniqueConflictError) Unwrap() error { return ErrUniqueConflict }

// uniqueSpec is a validated UniqueOpts, as the insert statements take it.
type uniqueSpec struct {
	states   int16 // bitmask: ready 1, running 2, succeeded 4, dead 8, cancelled 16
	byQueue  bool
	byArgs   bool
	fields   []string // never nil: empty means all fields
	periodMs int64
}

var stateBits = jobrow.StateBits

// maxUniquePeriod bounds UniqueOpts.ByPeriod (about 100 years).
const maxUniquePeriod = 100 * 365 * 24 * time.Hour

func prepareUnique(u *UniqueOpts, payload []byte) (*uniqueSpec, error) {
	if u == nil {
		return nil, nil
	}
	s := &uniqueSpec{states: 3, byQueue: u.ByQueue, byArgs: u.ByArgs || len(u.Fields) > 0, fields: []string{}}
	for _, st := range u.States {
		bit, ok := stateBits[st]
		if !ok {
			return nil, &OptionError{Field: "Unique.States", Msg: fmt.Sprintf("unknown state %q", st)}
		}
		s.states |= bit
	}
	switch {
	case u.ByPeriod < 0 || (u.ByPeriod > 0 && u.ByPeriod < time.Second) || u.ByPeriod > maxUniquePeriod:
		return nil, &OptionError{Field: "Unique.ByPeriod", Msg: fmt.Sprintf("%v: must be 0 or within 1s..%v", u.ByPeriod, maxUniquePeriod)}
	case len(u.Fields) > MaxUniqueFields:
		return nil, &OptionError{Field: "Unique.Fields", Msg: fmt.Sprintf("%d fields, at most %d allowed", len(u.Fields), MaxUniqueFields)}
	}
	s.periodMs = u.ByPeriod.Milliseconds()
	if len(u.Fields) > 0 {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(payload, &top); err != nil {
			return nil, &OptionError{Field: "Unique.Fields", Msg: "the encoded args are not a JSON object: " + err.Error()}
		}
		for _, f := range u.Fields {
			if _, ok := top[f]; !ok {
				return nil, &OptionError{Field: "Unique.Fields", Msg: fmt.Sprintf("field %q is not in the encoded args", truncate(f))}
			}
			if !slices.Contains(s.fields, f) {
				s.fields = append(s.fields, f)
			}
		}
		slices.Sort(s.fields) // the key does not depend on the order fields are named in
	}
	return s, nil
}

// Bounds of InsertOpts.Tags. The database refuses tags outside them too.
const (
	MaxTags     = generics.MaxTags
	MaxTagBytes = generics.MaxTagBytes
)

var tagRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/=+-]{0,63}$`)

// ValidTag reports whether tag is a valid tag: 1..64 characters of letters, digits and
// _ . : / = + -, starting with a letter or digit.
func ValidTag(tag string) bool { return tagRE.MatchString(tag) }

// prepareTags validates tags and returns them without repeats, in the order given (never nil).
func prepareTags(tags []string) ([]string, error) {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if !ValidTag(t) {
			return nil, &OptionError{Field: "Tags", Msg: fmt.Sprintf("%q: a tag is 1..%d characters of letters, digits and _ . : / = + -, starting with a letter or digit", truncate(t), MaxTagBytes)}
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) > MaxTags {
		return nil, &OptionError{Field: "Tags", Msg: fmt.Sprintf("%d tags, at most %d allowed", len(out), MaxTags)}
	}
	return out, nil
}
