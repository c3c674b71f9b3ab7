// Package dbschema is the one place that says what a Tenure schema name changes: the schema
// every statement names, the NOTIFY/LISTEN channels, and the advisory lock keys. Tenure's SQL
// (db/queries.sql, db/migrations, the few statements built in Go) is written for the default
// schema "tenure"; for another schema the same text is rewritten by Rewrite, once per
// statement (Schema.Rewrite caches), and run through Schema.Wrap, a wrapper around the pgx
// executor that sqlc's gen.New takes. For the default schema nothing is rewritten and Wrap
// returns the executor itself: the default path is the code as it was.
//
// What derives from the schema S (for "tenure", the historical values, so an existing
// deployment sees no change):
//
//	schema-qualified names    tenure.jobs              S.jobs
//	NOTIFY/LISTEN channels    tenure_jobs, _cancel,    S_jobs, S_cancel, S_queues,
//	                          _queues, _done, _await   S_done, S_await
//	bigint advisory keys      internal/locks values     48-bit hash of S, then the same 16-bit
//	                          ("tenure" + number)       number (never the "tenure" prefix)
//	int4 lock classes         locks.LimitsClass..+3,    a 32-bit hash of S, then +0..+4 (never
//	                          FinishWaitClass (= +4)    overlapping the default five)
//
// Two schemas other than "tenure" share a lock key only on a hash collision (2^-48 for the
// bigint keys, about 2^-29 for the int4 classes): a shared class only serializes two schemas'
// limited claims or makes a sweep skip a row once more, never a safety breach (the keys are
// mutual-exclusion hints; the rows' fences are per schema).
package dbschema

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/internal/locks"
)

// Default is the schema Tenure uses when none is configured.
const Default = "tenure"

// MaxLen is the longest schema name accepted: a channel name (schema + "_queues") must fit
// PostgreSQL's 63-byte identifiers.
const MaxLen = 63 - len("_queues")

// ErrInvalid is wrapped by every error that refuses a schema name (an *InvalidError).
var ErrInvalid = errors.New("tenure: invalid schema name")

// InvalidError refuses a schema name. It unwraps to ErrInvalid.
type InvalidError struct {
	// Name is the refused name.
	Name string
	// Reason says why.
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%v %q: %s", ErrInvalid, e.Name, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// reserved are PostgreSQL's reserved and type/function-name keywords (pg_get_keywords() catcode
// R and T, PostgreSQL 15..17): none of them can name a schema unquoted in `S.jobs`.
// migrations.TestInvalidSchemaRefused checks that Validate refuses every one the server lists.
var reserved = map[string]bool{}

func init() {
	for _, w := range reservedWords {
		reserved[w] = true
	}
}

var reservedWords = []string{"all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
	"authorization", "binary", "both", "case", "cast", "check", "collate", "collation", "column",
	"concurrently", "constraint", "create", "cross", "current_catalog", "current_date", "current_role",
	"current_schema", "current_time", "current_timestamp", "current_user", "default", "deferrable", "desc",
	"distinct", "do", "else", "end", "except", "false", "fetch", "for", "foreign", "freeze", "from", "full",
	"grant", "group", "having", "ilike", "in", "initially", "inner", "intersect", "into", "is", "isnull",
	"join", "lateral", "leading", "left", "like", "limit", "localtime", "localtimestamp", "natural", "not",
	"notnull", "null", "offset", "on", "only", "or", "order", "outer", "overlaps", "placing", "primary",
	"references", "returning", "right", "select", "session_user", "similar", "some", "symmetric",
	"system_user", "table", "tablesample", "then", "to", "trailing", "true", "union", "unique", "user",
	"using", "variadic", "verbose", "when", "where", "window", "with"}

// Validate returns nil for a usable schema name and an *InvalidError otherwise. A usable name
// is a plain lower-case identifier (a-z, 0-9, '_', not starting with a digit) of at most MaxLen
// bytes that is not a reserved keyword, not "public" (Tenure's tables would mix with the
// application's) and not a system schema (pg_*, information_schema). The empty string is not
// a name (configurations map it to Default before validating).
func Validate(name string) error {
	switch {
	case name == "":
		return &InvalidError{Name: name, Reason: "empty"}
	case len(name) > MaxLen:
		return &InvalidError{Name: name, Reason: fmt.Sprintf("longer than %d bytes", MaxLen)}
	case !nameRE.MatchString(name):
		return &InvalidError{Name: name, Reason: "not a plain lower-case identifier (a-z, 0-9, _; not starting with a digit)"}
	case reserved[name]:
		return &InvalidError{Name: name, Reason: "a reserved SQL keyword"}
	case name == "public":
		return &InvalidError{Name: name, Reason: "Tenure needs a schema of its own, not the application's public schema"}
	case name == "information_schema" || len(name) >= 3 && name[:3] == "pg_":
		return &InvalidError{Name: name, Reason: "a system schema"}
	}
	return nil
}

// Schema is a validated schema name and everything derived from it. Its methods are safe for
// concurrent use.
type Schema struct {
	name string
	// rewrite caches Rewrite's result per statement text (nil for the default schema).
	cache   sync.Map
	entries atomic.Int64
	bigint  int64 // the 48-bit prefix of the bigint keys, shifted into place
	class   int32 // the first of the five int4 classes
}

// maxCached bounds the cache: Tenure's statements are constants (a few hundred); text built
// per call beyond the bound is rewritten each time rather than kept.
const maxCached = 4096

var (
	defaultSchema = &Schema{name: Default, bigint: int64(locks.Migrate) &^ 0xffff, class: locks.LimitsClass}
	known         sync.Map // name -> *Schema
)

func init() { known.Store(Default, defaultSchema) }

// New validates name ("" means Default) and returns its Schema; every call with one name
// returns the same *Schema (so its statement cache is shared by all clients and workers of
// the process).
func New(name string) (*Schema, error) {
	if name == "" {
		name = Default
	}
	if s, ok := known.Load(name); ok {
		return s.(*Schema), nil
	}
	if err := Validate(name); err != nil {
		return nil, err
	}
	s := &Schema{name: name}
	h := fnv.New64a()
	_, _ = h.Write([]byte("tenure advisory lock keys of schema " + name))
	prefix := h.Sum64() >> 16
	if int64(prefix) == int64(locks.Migrate)>>16 {
		prefix ^= 1
	}
	s.bigint = int64(prefix << 16)
	h32 := fnv.New32a()
	_, _ = h32.Write([]byte("tenure lock classes of schema " + name))
	base := int32(h32.Sum32() % (1<<31 - 16))
	if d := int64(base) - int64(locks.LimitsClass); d > -5 && d < 5 {
		base += 10
	}
	s.class = base
	got, _ := known.LoadOrStore(name, s)
	return got.(*Schema), nil
}

// Must is New for names known to be valid (tests, Default); it panics on an invalid one.
func Must(name string) *Schema {
	s, err := New(name)
	if err != nil {
		panic(err)
	}
	return s
}

// IsKnown reports whether name is a schema this process configured (New succeeded for it), or
// Default.
func IsKnown(name string) bool {
	_, ok := known.Load(name)
	return ok
}

// Name is the schema's name.
func (s *Schema) Name() string { return s.name }

// IsDefault reports whether the schema is Default ("tenure").
func (s *Schema) IsDefault() bool { return s.name == Default }

// Qualify returns "schema.object".
func (s *Schema) Qualify(object string) string { return s.name + "." + object }

// The NOTIFY/LISTEN channels, by purpose.
const (
	chanJobs   = "_jobs"   // a job became ready (queue, priority, run_at)
	chanCancel = "_cancel" // an operator asked to cancel a running job (its id)
	chanQueues = "_queues" // a queue was paused or resumed (its name)
	chanDone   = "_done"   // jobs reached a final state (their ids, comma-separated)
	chanAwait  = "_await"  // a client waits for these jobs (their ids, comma-separated)
)

// JobsChannel is the channel inserts notify ("tenure_jobs" for Default).
func (s *Schema) JobsChannel() string { return s.name + chanJobs }

// CancelChannel is the channel cancel requests notify ("tenure_cancel" for Default).
func (s *Schema) CancelChannel() string { return s.name + chanCancel }

// QueuesChannel is the channel pause/resume notify ("tenure_queues" for Default).
func (s *Schema) QueuesChannel() string { return s.name + chanQueues }

// DoneChannel is the channel the finishes notify when jobs reach a final state, with their
// ids, comma-separated ("tenure_done" for Default; jobs.Client.Wait listens on it).
func (s *Schema) DoneChannel() string { return s.name + chanDone }

// AwaitChannel is the channel jobs.Client.Wait announces the jobs it waits for on, with their
// ids, comma-separated ("tenure_await" for Default; the workers listen on it and write those
// jobs' finishes without lingering).
func (s *Schema) AwaitChannel() string { return s.name + chanAwait }

// SignalsSetting is the transaction-local setting the engine's finish statements set to
// 'after_commit' ("tenure.signals" for Default): the settle of dependents (settle_jobs,
// migration 0029) then sends no NOTIFY in their transaction, the engine sends it after the
// commit. Per schema, as the channels are.
func (s *Schema) SignalsSetting() string { return s.name + ".signals" }

// Key returns the schema's bigint advisory lock key for the purpose k names (a key of
// internal/locks): k itself for Default.
func (s *Schema) Key(k locks.Key) int64 {
	if s.IsDefault() {
		return int64(k)
	}
	return s.bigint | int64(k)&0xffff
}

// LimitsClass is the first int4 of the schema's limit stripe locks (locks.LimitsClass for
// Default); the stripes are LimitsClass+0..3.
func (s *Schema) LimitsClass() int32 { return s.class }

// FinishWaitClass is the int4 class of the schema's finish-wait locks
// (locks.FinishWaitClass for Default).
func (s *Schema) FinishWaitClass() int32 {
	return s.class + (locks.FinishWaitClass - locks.LimitsClass)
}

// Rewrite returns sql rewritten for the schema (Rewrite(sql, s.Name())), cached per text. For
// Default it returns sql.
func (s *Schema) Rewrite(sql string) string {
	if s.IsDefault() {
		return sql
	}
	if v, ok := s.cache.Load(sql); ok {
		return v.(string)
	}
	out := Rewrite(sql, s.name)
	if s.entries.Load() < maxCached {
		if _, loaded := s.cache.LoadOrStore(sql, out); !loaded {
			s.entries.Add(1)
		}
	}
	return out
}

// DBTX is the executor sqlc's generated code takes (db/gen.DBTX has the same method set).
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// Wrap returns db for Default, and otherwise an executor that runs every statement rewritten
// for the schema: the one seam through which Tenure's SQL reaches another schema
// (gen.New(s.Wrap(db))).
func (s *Schema) Wrap(db DBTX) DBTX {
	if s.IsDefault() {
		return db
	}
	return &rewriting{db: db, s: s}
}

type rewriting struct {
	db DBTX
	s  *Schema
}

func (r *rewriting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return r.db.Exec(ctx, r.s.Rewrite(sql), args...)
}

func (r *rewriting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return r.db.Query(ctx, r.s.Rewrite(sql), args...)
}

func (r *rewriting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return r.db.QueryRow(ctx, r.s.Rewrite(sql), args...)
}

// literalMap returns the whole string literals and integer literals Tenure's SQL spells for
// the default schema that Rewrite maps for schema: the channel names (pg_notify('tenure_jobs',
// ...)) and the int4 lock classes (pg_advisory_xact_lock(1952804473, ...)).
func literalMap(schema string) (strs map[string]string, ints map[string]string) {
	d, s := defaultSchema, Must(schema)
	strs = map[string]string{
		d.JobsChannel(): s.JobsChannel(), d.CancelChannel(): s.CancelChannel(), d.QueuesChannel(): s.QueuesChannel(),
		d.DoneChannel(): s.DoneChannel(), d.AwaitChannel(): s.AwaitChannel(),
		d.SignalsSetting(): s.SignalsSetting(),
	}
	ints = map[string]string{}
	for i := int32(0); i <= locks.FinishWaitClass-locks.LimitsClass; i++ {
		ints[strconv.Itoa(int(d.class+i))] = strconv.Itoa(int(s.class + i))
	}
	return strs, ints
}
