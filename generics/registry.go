package generics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultMaxPayloadBytes is the default limit on a payload: MaxArgsBytes (64 KiB of jsonb text).
const DefaultMaxPayloadBytes = MaxArgsBytes

// Upgrader rewrites a payload stored at version From into version From+1.
type Upgrader struct {
	From int
	Fn   func(old json.RawMessage) (json.RawMessage, error)
}

// UpgradeJSON returns an Upgrader from version from to from+1 that works on raw JSON.
func UpgradeJSON(from int, fn func(old json.RawMessage) (json.RawMessage, error)) Upgrader {
	return Upgrader{From: from, Fn: fn}
}

// Upgrade returns a typed Upgrader from version from to from+1: the stored payload is decoded
// strictly into Old and the result of fn is encoded as the next version's payload.
func Upgrade[Old any, New any](from int, fn func(Old) (New, error)) Upgrader {
	return Upgrader{From: from, Fn: func(raw json.RawMessage) (json.RawMessage, error) {
		var old Old
		if err := strictUnmarshal(raw, &old); err != nil {
			return nil, err
		}
		next, err := fn(old)
		if err != nil {
			return nil, err
		}
		return json.Marshal(next)
	}}
}

// KindDefaults are a kind's defaults, declared once with its args type (ArgsWithDefaults) or
// recorded from a worker's HandlerOptions. Zero fields mean "not set": the next layer applies
// (docs/guide.md "Kind defaults").
type KindDefaults struct {
	// Queue, Priority (1..9), MaxAttempts (1..1000) and Lease (1s..24h) are enqueue defaults:
	// every insert path applies them when the insert does not say.
	Queue       string
	Priority    int
	MaxAttempts int
	Lease       time.Duration
	// Timeout bounds one attempt (worker.HandlerOptions.Timeout).
	Timeout time.Duration
	// RetryBase and RetryCap make the kind's retry policy worker.FullJitter{Base, Cap}
	// (worker.HandlerOptions.Retry, when set, replaces it).
	RetryBase, RetryCap time.Duration
	// Unique, when set, makes the kind's jobs unique unless the insert's own Unique says
	// otherwise (the Go insert paths; tenure.enqueue takes uniqueness from its arguments only).
	Unique *UniqueDefaults
	// DeleteOnSuccess makes the engine delete a job of the kind when it succeeds, in its
	// fenced finish, instead of keeping a succeeded row until pruning
	// (worker.HandlerOptions.DeleteOnSuccess; docs/guide.md §28). It cannot be combined with
	// a Unique whose States include "succeeded" (ErrDeleteOnSuccessUnique).
	DeleteOnSuccess bool
}

// KindInfo is what the registry knows about one kind.
type KindInfo struct {
	Kind     string
	Version  int
	Defaults KindDefaults
	Type     reflect.Type

	upgraders map[int]Upgrader
}

// Upgraders returns the versions that have an upgrader, ascending.
func (k *KindInfo) Upgraders() []int {
	out := make([]int, 0, len(k.upgraders))
	for v := range k.upgraders {
		out = append(out, v)
	}
	sort.Ints(out)
	return out
}

// Registry knows the registered kinds. It is safe for concurrent use. A worker owns one
// (Worker.Registry); pass the same registry to the enqueue client so strict kind checking and
// the defaults recorded from HandlerOptions apply at enqueue (declared defaults,
// ArgsWithDefaults, apply without it).
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]*KindInfo
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{kinds: map[string]*KindInfo{}} }

// KindOption configures a kind at registration.
type KindOption func(*KindInfo)

// WithUpgrader registers upgraders for older payload versions.
func WithUpgrader(ups ...Upgrader) KindOption {
	return func(k *KindInfo) {
		for _, u := range ups {
			k.upgraders[u.From] = u
		}
	}
}

// WithDefaults sets the kind's enqueue defaults.
func WithDefaults(d KindDefaults) KindOption { return func(k *KindInfo) { k.Defaults = d } }

// Register adds args type A to the registry. Registering the same type again merges its
// options; a different type under the same kind is ErrDuplicateKind. Upgraders must cover
// versions below the current one only.
func Register[A Args](r *Registry, opts ...KindOption) (*KindInfo, error) {
	var zero A
	kind, version := zero.Kind(), zero.PayloadVersion()
	if kind == "" || len(kind) > 128 {
		return nil, fmt.Errorf("%w: kind %q must be 1..128 bytes", ErrInvalidPayload, kind)
	}
	if version < 1 {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrUnsupportedVersion, Err: errors.New("payload version must be >= 1")}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	info, ok := r.kinds[kind]
	typ := reflect.TypeFor[A]()
	if ok && info.Type != typ {
		return nil, fmt.Errorf("%w: %q is registered by %v and %v", ErrDuplicateKind, kind, info.Type, typ)
	}
	if !ok {
		info = &KindInfo{Kind: kind, Version: version, Type: typ, upgraders: map[int]Upgrader{}}
	}
	next := *info
	next.upgraders = make(map[int]Upgrader, len(info.upgraders))
	for v, u := range info.upgraders {
		next.upgraders[v] = u
	}
	for _, o := range opts {
		o(&next)
	}
	for v := range next.upgraders {
		if v < 1 || v >= version {
			return nil, &PayloadError{Kind: kind, Version: v, Reason: ErrUnsupportedVersion,
				Err: fmt.Errorf("upgrader from version %d is not below the current version %d", v, version)}
		}
	}
	r.kinds[kind] = &next
	return &next, nil
}

// MustRegister is Register that panics on error, for package-level setup.
func MustRegister[A Args](r *Registry, opts ...KindOption) *KindInfo {
	info, err := Register[A](r, opts...)
	if err != nil {
		panic(err)
	}
	return info
}

// Lookup returns a copy of what the registry knows about kind: changing it changes nothing
// in the registry (register again, with options, to change a kind).
func (r *Registry) Lookup(kind string) (*KindInfo, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.kinds[kind]
	if !ok {
		return nil, false
	}
	c := *k // upgraders is never written after registration (Register copies on write)
	return &c, true
}

// Kinds returns the registered kind names, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Encode validates args (when it implements Validator) and encodes it as a JSON object of at
// most maxBytes bytes as the database measures it (jsonb text, JSONSize; <= 0 or above
// MaxArgsBytes means MaxArgsBytes). Text a jsonb payload cannot store
// as given — a NUL character or a string that is not valid UTF-8, in a value or a map key —
// is refused with a *PayloadError (Reason ErrInvalidPayload, cause ErrNULCharacter or
// ErrInvalidUTF8, Path naming the field) instead of failing in the database or being changed.
func Encode(args Args, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 || maxBytes > MaxArgsBytes {
		maxBytes = MaxArgsBytes
	}
	if args == nil || (reflect.ValueOf(args).Kind() == reflect.Pointer && reflect.ValueOf(args).IsNil()) {
		return nil, &PayloadError{Reason: ErrInvalidPayload, Err: errors.New("nil args")}
	}
	kind, version := args.Kind(), args.PayloadVersion()
	if version < 1 || version > math.MaxInt32 {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrUnsupportedVersion,
			Err: fmt.Errorf("payload version must be within 1..%d", math.MaxInt32)}
	}
	if err := checkKind(kind); err != nil {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: err}
	}
	if err := validate(args); err != nil {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: err}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: err}
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: errors.New("args must encode as a JSON object")}
	}
	// The database's measure, on the text the database will parse: what passes here passes
	// tenure.enqueue's and the table's checks (a custom marshaler's bad JSON is caught too).
	// It also finds NUL and invalid UTF-8; checkText then names the field. An escaped U+FFFD
	// is what encoding/json writes for invalid UTF-8 in a Go string: checkText tells that
	// apart from a real U+FFFD.
	size, err := JSONSize(raw)
	if err != nil || bytes.Contains(raw, []byte(`\ufffd`)) {
		if path, terr := checkText(raw, args); terr != nil {
			return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: terr, Path: path}
		}
	}
	if err != nil {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrInvalidPayload, Err: err}
	}
	if size > maxBytes {
		return nil, &PayloadError{Kind: kind, Version: version, Reason: ErrPayloadTooLarge,
			Err: &LimitError{What: "args", Size: size, Limit: maxBytes}}
	}
	return raw, nil
}

// checkKind refuses a kind the jobs table cannot hold: 1..128 characters of valid UTF-8
// without NUL (the schema's jobs_kind_len CHECK counts characters, not bytes).
func checkKind(kind string) error {
	switch n := utf8.RuneCountInString(kind); {
	case n < 1 || n > 128:
		return fmt.Errorf("kind %q must be 1..128 characters, is %d", kind, n)
	case !utf8.ValidString(kind):
		return fmt.Errorf("kind %q: %w", kind, ErrInvalidUTF8)
	case strings.IndexByte(kind, 0) >= 0:
		return fmt.Errorf("kind %q: %w", kind, ErrNULCharacter)
	}
	return nil
}

// Decode turns a stored payload of the given version into A: it rejects versions newer than
// A's, runs the registered upgraders for older ones (r may be nil when no upgrade is needed),
// decodes strictly (no unknown fields, no trailing data) and validates.
func Decode[A Args](r *Registry, raw []byte, version int) (A, error) {
	var out A
	kind, current := out.Kind(), out.PayloadVersion()
	fail := func(reason, err error) (A, error) {
		var zero A
		return zero, &PayloadError{Kind: kind, Version: version, Reason: reason, Err: err}
	}
	switch {
	case version < 1:
		return fail(ErrUnsupportedVersion, errors.New("stored version below 1"))
	case version > current:
		return fail(ErrUnsupportedVersion, fmt.Errorf("stored version is newer than this code's version %d", current))
	case version < current:
		info, ok := r.Lookup(kind)
		if !ok {
			return fail(ErrUnsupportedVersion, fmt.Errorf("no upgraders registered to reach version %d", current))
		}
		upgraded, err := info.upgrade(raw, version, current)
		if err != nil {
			return fail(ErrUnsupportedVersion, err)
		}
		raw = upgraded
	}
	if err := strictUnmarshal(raw, &out); err != nil {
		return fail(ErrInvalidPayload, err)
	}
	if err := validate(out); err != nil {
		return fail(ErrInvalidPayload, err)
	}
	return out, nil
}

// validate runs Validate when args has it, on a value or a pointer receiver.
func validate(args any) error {
	if v, ok := args.(Validator); ok {
		return v.Validate()
	}
	rv := reflect.ValueOf(args)
	if rv.Kind() == reflect.Pointer {
		return nil
	}
	ptr := reflect.New(rv.Type())
	ptr.Elem().Set(rv)
	if v, ok := ptr.Interface().(Validator); ok {
		return v.Validate()
	}
	return nil
}

func (k *KindInfo) upgrade(raw []byte, from, to int) ([]byte, error) {
	for v := from; v < to; v++ {
		u, ok := k.upgraders[v]
		if !ok {
			return nil, fmt.Errorf("no upgrader from version %d to %d", v, v+1)
		}
		next, err := u.Fn(raw)
		if err != nil {
			return nil, fmt.Errorf("upgrade from version %d: %w", v, err)
		}
		raw = next
	}
	return raw, nil
}

// strictUnmarshal decodes exactly one JSON value into v, rejecting unknown fields and
// trailing data.
//
// Its decoders are reused (every job's payload goes through here): a json.Decoder, its
// reader and its read buffer cost five allocations and more than 700 bytes per payload, more
// than decoding a small payload itself. A decoder goes back to the pool only after a payload
// decoded and the stream ended at its end: it then holds no unread byte (at most the
// payload's trailing white space, which the next value may be preceded by) and no sticky
// error, its token state is back at the top level, and the Decoder reads the next payload
// as the next value of its stream. One that failed is dropped.
func strictUnmarshal(raw []byte, v any) error {
	d := strictDecoders.Get().(*strictDecoder)
	d.r.Reset(raw)
	if err := d.dec.Decode(v); err != nil {
		return err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	d.r.Reset(nil) // keep no reference to the payload
	strictDecoders.Put(d)
	return nil
}

// strictDecoder is strictUnmarshal's reusable decoder: a strict json.Decoder reading r.
type strictDecoder struct {
	r   bytes.Reader
	dec *json.Decoder
}

var strictDecoders = sync.Pool{New: func() any {
	d := &strictDecoder{}
	d.dec = json.NewDecoder(&d.r)
	d.dec.DisallowUnknownFields()
	return d
}}
