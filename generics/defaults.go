package generics

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"time"
)

// ArgsWithDefaults is implemented by args types that declare their kind's defaults: the one
// place a kind's queue, priority, max attempts, lease, attempt timeout, retry backoff and
// uniqueness are written down (tenuregen writes the method from the //tenure:job directive;
// it can be written by hand). Every path honours it: jobs.Client's Insert* (with or without
// a registry), periodic jobs, tenurenats, tenuretest.Work and worker.Register (the handler's
// options default from it), and, through the tenure.kinds table workers publish at Start,
// tenure.enqueue from SQL.
//
// Precedence, field by field: per-insert options > the declared defaults > a worker's
// HandlerOptions (for kinds that declare nothing) > the package defaults. Defaults must return
// the same value every time (it is called on the zero value of the type too).
type ArgsWithDefaults interface {
	Args
	Defaults() KindDefaults
}

// DefaultsOf returns the defaults args declares (ArgsWithDefaults, on a value or a pointer
// receiver) and whether it declares any.
func DefaultsOf(args Args) (KindDefaults, bool) {
	if args == nil {
		return KindDefaults{}, false
	}
	if d, ok := args.(ArgsWithDefaults); ok {
		return d.Defaults(), true
	}
	rv := reflect.ValueOf(args)
	// Only a value whose pointer type has the method needs the copy below (no allocation on
	// the insert path of the many types that declare nothing).
	if rv.Kind() == reflect.Pointer || !reflect.PointerTo(rv.Type()).Implements(argsWithDefaultsType) {
		return KindDefaults{}, false
	}
	ptr := reflect.New(rv.Type())
	ptr.Elem().Set(rv)
	if d, ok := ptr.Interface().(ArgsWithDefaults); ok {
		return d.Defaults(), true
	}
	return KindDefaults{}, false
}

var argsWithDefaultsType = reflect.TypeFor[ArgsWithDefaults]()

// DefaultsFor returns the defaults args type A declares, as DefaultsOf on A's zero value.
func DefaultsFor[A Args]() (KindDefaults, bool) {
	var zero A
	return DefaultsOf(zero)
}

// UniqueDefaults is the declared form of jobs.UniqueOpts (see there): a kind whose jobs are
// unique unless the insert says otherwise. States names states besides ready and running
// that keep the key: "succeeded", "dead", "cancelled".
type UniqueDefaults struct {
	ByArgs   bool
	Fields   []string
	ByQueue  bool
	ByPeriod time.Duration
	States   []string
}

// HoldsSucceeded reports whether u keeps the key while a job is succeeded (States names
// "succeeded").
func (u *UniqueDefaults) HoldsSucceeded() bool {
	return u != nil && slices.Contains(u.States, "succeeded")
}

var defaultsQueueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Check reports the first field of d outside its range (zero fields are "not set" and
// always pass) as an error naming the field.
func (d KindDefaults) Check() error {
	switch {
	case d.Queue != "" && !defaultsQueueRE.MatchString(d.Queue):
		return fmt.Errorf("Queue %q is not a valid queue name", d.Queue)
	case d.Priority < 0 || d.Priority > 9:
		return fmt.Errorf("Priority %d is outside 1..9", d.Priority)
	case d.MaxAttempts < 0 || d.MaxAttempts > 1000:
		return fmt.Errorf("MaxAttempts %d is outside 1..1000", d.MaxAttempts)
	case d.Lease != 0 && (d.Lease < time.Second || d.Lease > 24*time.Hour):
		return fmt.Errorf("Lease %v is outside 1s..24h", d.Lease)
	case d.Timeout < 0:
		return fmt.Errorf("Timeout %v must be >= 0", d.Timeout)
	case d.RetryBase < 0 || d.RetryCap < 0:
		return fmt.Errorf("RetryBase %v and RetryCap %v must be >= 0", d.RetryBase, d.RetryCap)
	}
	if u := d.Unique; u != nil {
		for _, s := range u.States {
			if s != "succeeded" && s != "dead" && s != "cancelled" {
				return fmt.Errorf("Unique.States: %q is not one of succeeded, dead, cancelled", s)
			}
		}
		if d.DeleteOnSuccess && u.HoldsSucceeded() {
			return fmt.Errorf("%w: DeleteOnSuccess with Unique.States %v", ErrDeleteOnSuccessUnique, u.States)
		}
		if u.ByPeriod != 0 && u.ByPeriod < time.Second {
			return fmt.Errorf("Unique.ByPeriod %v is below 1s", u.ByPeriod)
		}
	}
	return nil
}

// Or returns d with its zero fields taken from under: how declared defaults are layered over
// a registry's.
func (d KindDefaults) Or(under KindDefaults) KindDefaults {
	if d.Queue == "" {
		d.Queue = under.Queue
	}
	if d.Priority == 0 {
		d.Priority = under.Priority
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = under.MaxAttempts
	}
	if d.Lease == 0 {
		d.Lease = under.Lease
	}
	if d.Timeout == 0 {
		d.Timeout = under.Timeout
	}
	if d.RetryBase == 0 {
		d.RetryBase = under.RetryBase
	}
	if d.RetryCap == 0 {
		d.RetryCap = under.RetryCap
	}
	if d.Unique == nil {
		d.Unique = under.Unique
	}
	d.DeleteOnSuccess = d.DeleteOnSuccess || under.DeleteOnSuccess
	return d
}

// Conflicts lists the fields set (non-zero) in both d and other with different values, for
// worker.Register, which refuses handler options that contradict the declaration.
func (d KindDefaults) Conflicts(other KindDefaults) []string {
	var out []string
	add := func(name string, a, b any, set bool) {
		if set && a != b {
			out = append(out, fmt.Sprintf("%s: %v declared, %v given", name, a, b))
		}
	}
	add("Queue", d.Queue, other.Queue, d.Queue != "" && other.Queue != "")
	add("Priority", d.Priority, other.Priority, d.Priority != 0 && other.Priority != 0)
	add("MaxAttempts", d.MaxAttempts, other.MaxAttempts, d.MaxAttempts != 0 && other.MaxAttempts != 0)
	add("Lease", d.Lease, other.Lease, d.Lease != 0 && other.Lease != 0)
	add("Timeout", d.Timeout, other.Timeout, d.Timeout != 0 && other.Timeout != 0)
	if d.Unique != nil && other.Unique != nil && !equalUnique(d.Unique, other.Unique) {
		out = append(out, fmt.Sprintf("Unique: %+v declared, %+v given", *d.Unique, *other.Unique))
	}
	return out
}

// equalUnique reports whether two unique declarations are the same.
func equalUnique(a, b *UniqueDefaults) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ByArgs == b.ByArgs && a.ByQueue == b.ByQueue && a.ByPeriod == b.ByPeriod &&
		slices.Equal(a.Fields, b.Fields) && slices.Equal(a.States, b.States)
}
