package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
)

// Priorities. Higher runs first under strict priority; fairness policies may let an older
// lower-priority job go first (see worker.Fairness). The valid range is 1..9.
const (
	PriorityLow      = 1
	PriorityNormal   = 2
	PriorityHigh     = 3
	PriorityCritical = 4
	PriorityMax      = 9
)

// Defaults applied when neither the insert options nor the kind's declared defaults
// (generics.ArgsWithDefaults) nor a registry's say otherwise.
const (
	DefaultQueue       = "default"
	DefaultPriority    = PriorityNormal
	DefaultMaxAttempts = 25
	DefaultLease       = 30 * time.Second
	// insertChunk bounds the rows sent in one statement by InsertMany.
	insertChunk = 5000
)

// The window InsertOpts.RunAt must fall in: [minRunAt, maxRunAt), the database's window for
// every job time (domain tenure.job_time).
var (
	minRunAt = generics.MinJobTime
	maxRunAt = generics.MaxJobTime
)

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// ValidQueueName reports whether name is a valid queue name: 1..128 characters of letters,
// digits, '_', '.', ':' and '-', starting with a letter or digit.
func ValidQueueName(name string) bool { return queueNameRE.MatchString(name) }

// Config configures a Client. A nil *Config, or zero fields, mean the defaults.
type Config struct {
	// Registry, when set, makes enqueue strict: unregistered kinds are refused with
	// ErrUnknownKind, and the kind's registered defaults (queue, priority, max attempts,
	// lease: from HandlerOptions) apply under the args type's declared defaults, which apply
	// with or without a registry. Pass the worker's registry (worker.Worker.Registry).
	Registry *generics.Registry
	// MaxPayloadBytes bounds a payload, measured as the database measures it (bytes of jsonb
	// text, generics.JSONSize). Default and maximum generics.MaxArgsBytes (64 KiB), the
	// database's own bound (tenure.enqueue applies it too).
	MaxPayloadBytes int
	// Logger receives operator-action logs. Default slog.Default().
	Logger *slog.Logger
	// Queues, when not empty, lists the queues some worker serves: an insert into any other
	// queue (a typo, or a kind whose queue no worker runs) is refused with ErrUnknownQueue
	// instead of waiting forever. Default: nil, every valid queue name is accepted.
	Queues []string
	// BeforeInsert, when set, is called for every job an Insert* call enqueues, before its
	// options are validated, with the call's context, the job's kind and a copy of its
	// options (Metadata is a copy too) that it may change: the seam for adding metadata such
	// as a trace context (package tenureotel). It must be safe for concurrent use.
	BeforeInsert func(ctx context.Context, kind string, opts *InsertOpts)
	// Schema is the PostgreSQL schema holding Tenure's tables, migrated into it with
	// migrations.NewRunner(migrations.Options{Schema: ...}). Default "tenure". Clients and
	// workers of one schema share nothing with another's: jobs, NOTIFY channels, pauses and
	// advisory locks are all per schema (docs/guide.md, "A schema of your own"). An invalid
	// name is refused by NewClient with a *migrations.InvalidSchemaError
	// (migrations.ErrInvalidSchema).
	Schema string
	// WaitPoll is how often Wait re-reads every waited job besides the notifications (the
	// fallback when a notification is lost, e.g. while the LISTEN connection is replaced).
	// Default DefaultWaitPoll (1 s); it must not be negative.
	WaitPoll time.Duration
}

// Client enqueues jobs and serves the read and operator side. It is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	q    *gen.Queries
	reg  *generics.Registry
	max  int
	log  *slog.Logger
	// queues is Config.Queues as a set; nil accepts every queue.
	queues map[string]bool
	hook   func(ctx context.Context, kind string, opts *InsertOpts)
	// sch is Config.Schema: every statement runs through sch.Wrap (qtx).
	sch *dbschema.Schema
	// waits is the registry of Wait's waiters (wait.go).
	waits *waitReg
}

// qtx returns the generated queries on db (a transaction or a connection), in the client's
// schema.
func (c *Client) qtx(db gen.DBTX) *gen.Queries { return gen.New(c.sch.Wrap(db)) }

// Schema is the schema the client works in (Config.Schema; "tenure" by default).
func (c *Client) Schema() string { return c.sch.Name() }

// NewClient returns a client on pool. The schema must be migrated (migrations.Up).
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, &OptionError{Field: "pool", Msg: "must not be nil"}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxPayloadBytes < 0 || c.MaxPayloadBytes > generics.MaxArgsBytes {
		return nil, &OptionError{Field: "MaxPayloadBytes", Msg: fmt.Sprintf("%d is outside 0..%d", c.MaxPayloadBytes, generics.MaxArgsBytes)}
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = generics.DefaultMaxPayloadBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WaitPoll < 0 {
		return nil, &OptionError{Field: "WaitPoll", Msg: "must not be negative"}
	}
	if c.WaitPoll == 0 {
		c.WaitPoll = DefaultWaitPoll
	}
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, err
	}
	cl := &Client{pool: pool, q: gen.New(sch.Wrap(pool)), reg: c.Registry, max: c.MaxPayloadBytes, log: c.Logger, hook: c.BeforeInsert, sch: sch}
	cl.waits = newWaitReg(cl, c.WaitPoll)
	if len(c.Queues) > 0 {
		cl.queues = make(map[string]bool, len(c.Queues))
		for _, q := range c.Queues {
			if !ValidQueueName(q) {
				return nil, &OptionError{Field: "Queues", Msg: fmt.Sprintf("%q is not a valid queue name", q)}
			}
			cl.queues[q] = true
		}
	}
	return cl, nil
}

// InsertOpts are per-insert options. Zero fields mean the args type's declared defaults
// (generics.ArgsWithDefaults), then a registry's defaults for the kind, then the package
// defaults (docs/guide.md §9, "Kind defaults").
type InsertOpts struct {
	Queue    string
	Priority int // 1..9; 0 means default
	// RunAt schedules the job at an absolute time. Mutually exclusive with Delay. It must lie
	// within 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z (inclusive): a time before the
	// Unix epoch or past year 9999 is certainly a bug (PostgreSQL would store year 1 and
	// refuse year 294277 with "timestamp out of range"), so it is refused with an *OptionError
	// (Field "RunAt"). A time in the past within the window means "due now".
	RunAt time.Time
	// Delay schedules the job Delay after the insert, on the database clock. Any non-negative
	// Duration is accepted (the largest is about 292 years).
	Delay       time.Duration
	MaxAttempts int           // 1..1000
	Lease       time.Duration // 1s..24h: how long a claim owns the job without a heartbeat
	// Metadata is carried with the job and handed to its handler (generics.Job.Metadata):
	// context of the enqueuer such as a W3C trace context or a request id, not arguments.
	// At most MaxMetadataEntries entries; keys 1..MaxMetadataKeyBytes bytes; keys and values
	// valid UTF-8 without NUL; at most MaxMetadataBytes encoded as JSON. Otherwise the insert
	// is refused with an *OptionError (Field "Metadata").
	Metadata map[string]string
	// Tags are short labels kept with the job: readable by its handler (generics.Job.Tags),
	// searchable with List (ListParams.Tags) and the CLI (tenure jobs list -tag). At most
	// MaxTags distinct tags, each valid by ValidTag; repeats are dropped. Otherwise the insert
	// is refused with an *OptionError (Field "Tags").
	Tags []string
	// Unique, when set, makes the job unique (see UniqueOpts): if a job with the same unique
	// key holds it, the insert returns that job's row with InsertResult.Duplicate set instead
	// of inserting.
	Unique *UniqueOpts
	// ConcurrencyKey puts the job in a group of its own for the per-key limits of its queue
	// (worker.Limit with PerKey: "at most 2 running per customer", "10 starts a second per
	// account"). It is stored in Metadata under ConcurrencyKeyMetadata (replacing an entry
	// there), so the handler sees it too. When empty, an args type implementing
	// ConcurrencyKeyer supplies it. At most MaxConcurrencyKeyBytes bytes of valid UTF-8
	// without NUL, else an *OptionError (Field "ConcurrencyKey"). Default none: per-key
	// limits do not cover the job (limits per kind or queue still do).
	ConcurrencyKey string
	// FairKey names the job's tenant for fair share (worker.Fairness.FairShare): within a
	// priority band, a fair-share queue serves the tenants with ready jobs round robin, so a
	// tenant with a million queued jobs cannot starve one with a single job. It is stored in
	// Metadata under FairKeyMetadata (replacing an entry there). When empty, an args type
	// implementing FairKeyer supplies it. At most MaxConcurrencyKeyBytes bytes of valid UTF-8
	// without NUL, else an *OptionError (Field "FairKey"). Default none: in a fair-share queue
	// a job without a key is served in the band's oldest-first order (docs/guide.md §20).
	FairKey string
	// Sequence puts the job in a sequence: the jobs of one sequence key run one at a time,
	// in insertion order (the order in which their inserting transactions took the key),
	// across every worker. A job waits (generics.JobStateWaiting) until the job inserted
	// before it in the sequence succeeded; a failed attempt that will be retried holds the
	// sequence. At most MaxConcurrencyKeyBytes bytes of valid UTF-8 without NUL, else an
	// *OptionError (Field "Sequence"); not with Unique, nor in InsertMany/InsertManyFast or a
	// workflow. Inserting into a sequence locks the key until the inserting transaction ends
	// (docs/guide.md, "Sequences"). Default none.
	Sequence string
	// SequenceOnFailure says what the job does when the job before it in the sequence ends
	// dead or cancelled: SequenceBlock (default) keeps it waiting until that job succeeds
	// (after an operator's retry) or it is cancelled; SequenceSkip runs it anyway.
	SequenceOnFailure SequenceOnFailure
}

// SequenceOnFailure is InsertOpts.SequenceOnFailure.
type SequenceOnFailure string

const (
	// SequenceBlock: a dead or cancelled job holds its sequence (the default).
	SequenceBlock SequenceOnFailure = "block"
	// SequenceSkip: the sequence moves on past a dead or cancelled job.
	SequenceSkip SequenceOnFailure = "skip"
)

// ConcurrencyKeyMetadata is the metadata entry that holds a job's concurrency key; the
// limited claim and its index (jobs_limited_idx) read it there.
const ConcurrencyKeyMetadata = "tenure.concurrency_key"

// FairKeyMetadata is the metadata entry that holds a job's fair-share key (its tenant); the
// fair claim and its index (jobs_fair_idx) read it there.
const FairKeyMetadata = "tenure.fair_key"

// FairKeyer is implemented by args types whose jobs carry a fair-share key taken from their
// arguments (e.g. the tenant id); InsertOpts.FairKey overrides it.
type FairKeyer interface {
	FairKey() string
}

// MaxConcurrencyKeyBytes bounds InsertOpts.ConcurrencyKey and InsertOpts.FairKey.
const MaxConcurrencyKeyBytes = 200

// ConcurrencyKeyer is implemented by args types whose jobs carry a concurrency key taken from
// their arguments (e.g. the customer id); InsertOpts.ConcurrencyKey overrides it.
type ConcurrencyKeyer interface {
	ConcurrencyKey() string
}

// Bounds of InsertOpts.Metadata, the same as the database's (generics/limits.go): the size is
// measured as jsonb text (generics.JSONSize).
const (
	MaxMetadataEntries  = generics.MaxMetadataEntries
	MaxMetadataKeyBytes = generics.MaxMetadataKeyBytes
	MaxMetadataBytes    = generics.MaxMetadataBytes
)

// Or returns a copy of o (nil counts as all zero) whose zero Queue, Priority, MaxAttempts,
// Lease and nil Unique are taken from d: how per-kind defaults are layered under per-insert
// options.
func (o *InsertOpts) Or(d InsertOpts) *InsertOpts {
	var out InsertOpts
	if o != nil {
		out = *o
	}
	if out.Queue == "" {
		out.Queue = d.Queue
	}
	if out.Priority == 0 {
		out.Priority = d.Priority
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = d.MaxAttempts
	}
	if out.Lease == 0 {
		out.Lease = d.Lease
	}
	if out.Unique == nil {
		out.Unique = d.Unique
	}
	return &out
}

// DefaultsInsertOpts returns the enqueue part of a kind's defaults (queue, priority, max
// attempts, lease, uniqueness) as InsertOpts, for layering under per-insert options with Or.
func DefaultsInsertOpts(d generics.KindDefaults) InsertOpts {
	o := InsertOpts{Queue: d.Queue, Priority: d.Priority, MaxAttempts: d.MaxAttempts, Lease: d.Lease}
	if u := d.Unique; u != nil {
		o.Unique = &UniqueOpts{ByArgs: u.ByArgs, Fields: slices.Clone(u.Fields), ByQueue: u.ByQueue, ByPeriod: u.ByPeriod}
		for _, st := range u.States {
			o.Unique.States = append(o.Unique.States, generics.JobState(st))
		}
	}
	return o
}

// InsertManyParams is one job of an InsertMany call.
type InsertManyParams struct {
	Args generics.Args
	Opts *InsertOpts
}

type prepared struct {
	queue, kind string
	payload     []byte
	version     int32
	priority    int16
	runAt       *time.Time
	delayUs     int64
	maxAttempts int32
	leaseMs     int32
	metadata    []byte
	tags        []string    // never nil
	unique      *uniqueSpec // nil: not unique
	sequence    string      // "": not in a sequence
	seqOnFail   string      // the edge's on_failure: "block" or "run"
	// Between prepareOpts and encodePayload only (payload and unique are unset then).
	args       generics.Args
	uniqueOpts *UniqueOpts
}

// emptyMetadata is the stored form of no metadata.
var emptyMetadata = []byte("{}")

// encodeMetadata validates and encodes InsertOpts.Metadata.
func encodeMetadata(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return emptyMetadata, nil
	}
	if len(m) > MaxMetadataEntries {
		return nil, &OptionError{Field: "Metadata", Msg: fmt.Sprintf("%d entries, at most %d allowed", len(m), MaxMetadataEntries)}
	}
	for k, v := range m {
		switch {
		case k == "" || len(k) > MaxMetadataKeyBytes:
			return nil, &OptionError{Field: "Metadata", Msg: fmt.Sprintf("key %q: length must be 1..%d bytes", truncate(k), MaxMetadataKeyBytes)}
		case !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0:
			return nil, &OptionError{Field: "Metadata", Msg: fmt.Sprintf("key %q: must be valid UTF-8 without NUL", truncate(k))}
		case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
			return nil, &OptionError{Field: "Metadata", Msg: fmt.Sprintf("value of %q: must be valid UTF-8 without NUL", truncate(k))}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, &OptionError{Field: "Metadata", Msg: err.Error()}
	}
	if err := generics.CheckJSON("metadata", b, MaxMetadataBytes); err != nil {
		return nil, &OptionError{Field: "Metadata", Msg: err.Error()}
	}
	return b, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return s
}

// dueNow reports whether the job is runnable at once, so its queue's workers should be woken.
// (An absolute RunAt is compared on this machine's clock: at worst a worker wakes early or
// finds it by polling.)
func (p *prepared) dueNow() bool {
	return p.delayUs == 0 && (p.runAt == nil || !p.runAt.After(time.Now()))
}

// prepare validates one job's args and options and encodes them: prepareOpts, then
// encodePayload.
func (c *Client) prepare(ctx context.Context, args generics.Args, opts *InsertOpts) (prepared, error) {
	p, err := c.prepareOpts(ctx, args, opts)
	if err != nil {
		return prepared{}, err
	}
	if err := c.encodePayload(&p); err != nil {
		return prepared{}, err
	}
	return p, nil
}

// encodePayload encodes and validates p's args (generics.Encode, the client's size limit) and
// derives the unique key from the payload: the part of prepare that is per-job work in
// proportion to the args, which InsertManyFast does while the rows before it are sent.
func (c *Client) encodePayload(p *prepared) error {
	payload, err := generics.Encode(p.args, c.max)
	if err != nil {
		return err
	}
	unique, err := prepareUnique(p.uniqueOpts, payload)
	if err != nil {
		return err
	}
	p.payload, p.unique, p.args, p.uniqueOpts = payload, unique, nil, nil
	return nil
}

// prepareOpts resolves and validates one job's options (hook, registered and library
// defaults, keys, metadata, tags): everything of prepare but the payload, which
// encodePayload adds.
func (c *Client) prepareOpts(ctx context.Context, args generics.Args, opts *InsertOpts) (prepared, error) {
	if args == nil {
		return prepared{}, &OptionError{Field: "args", Msg: "must not be nil"}
	}
	kind := args.Kind()
	if c.hook != nil {
		var o InsertOpts
		if opts != nil {
			o = *opts
		}
		o.Metadata = maps.Clone(o.Metadata)
		o.Tags = slices.Clone(o.Tags)
		if o.Unique != nil {
			u := *o.Unique
			u.Fields, u.States = slices.Clone(u.Fields), slices.Clone(u.States)
			o.Unique = &u
		}
		c.hook(ctx, kind, &o)
		opts = &o
	}
	// Declared defaults first (the args type's own, whatever the client was built with),
	// then what a registry recorded for the kind, then the package defaults.
	if d, ok := generics.DefaultsOf(args); ok {
		if err := d.Check(); err != nil {
			return prepared{}, &OptionError{Field: "Defaults", Msg: fmt.Sprintf("kind %q declares %v", kind, err)}
		}
		opts = opts.Or(DefaultsInsertOpts(d))
	}
	if c.reg != nil {
		info, ok := c.reg.Lookup(kind)
		if !ok {
			return prepared{}, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
		}
		if info.Version != args.PayloadVersion() {
			return prepared{}, &generics.PayloadError{Kind: kind, Version: args.PayloadVersion(), Reason: generics.ErrUnsupportedVersion,
				Err: fmt.Errorf("registered version is %d", info.Version)}
		}
		opts = opts.Or(DefaultsInsertOpts(info.Defaults))
	}
	o := *opts.Or(InsertOpts{Queue: DefaultQueue, Priority: DefaultPriority, MaxAttempts: DefaultMaxAttempts, Lease: DefaultLease})
	switch {
	case o.Queue != DefaultQueue && !ValidQueueName(o.Queue):
		return prepared{}, &OptionError{Field: "Queue", Msg: fmt.Sprintf("%q is not a valid queue name", o.Queue)}
	case c.queues != nil && !c.queues[o.Queue]:
		return prepared{}, fmt.Errorf("%w: %q (kind %q; known queues: %s)", ErrUnknownQueue, o.Queue, kind, strings.Join(slices.Sorted(maps.Keys(c.queues)), ", "))
	case o.Priority < 1 || o.Priority > PriorityMax:
		return prepared{}, &OptionError{Field: "Priority", Msg: fmt.Sprintf("%d is outside 1..%d", o.Priority, PriorityMax)}
	case o.MaxAttempts < 1 || o.MaxAttempts > 1000:
		return prepared{}, &OptionError{Field: "MaxAttempts", Msg: fmt.Sprintf("%d is outside 1..1000", o.MaxAttempts)}
	case o.Lease < time.Second || o.Lease > 24*time.Hour:
		return prepared{}, &OptionError{Field: "Lease", Msg: fmt.Sprintf("%v is outside 1s..24h", o.Lease)}
	case o.Delay < 0:
		return prepared{}, &OptionError{Field: "Delay", Msg: "must be >= 0"}
	case o.Delay > 0 && !o.RunAt.IsZero():
		return prepared{}, &OptionError{Field: "RunAt", Msg: "RunAt and Delay are mutually exclusive"}
	case o.Delay > 0 && !time.Now().Add(o.Delay).Before(maxRunAt):
		return prepared{}, &OptionError{Field: "Delay", Msg: fmt.Sprintf("%v from now is past %s", o.Delay, maxRunAt.Format(time.RFC3339))}
	case !o.RunAt.IsZero() && (o.RunAt.Before(minRunAt) || !o.RunAt.Before(maxRunAt)):
		return prepared{}, &OptionError{Field: "RunAt", Msg: fmt.Sprintf("%s is outside %s..%s",
			o.RunAt.UTC().Format(time.RFC3339Nano), minRunAt.Format(time.RFC3339), maxRunAt.Add(-time.Microsecond).Format(time.RFC3339Nano))}
	}
	ckey := o.ConcurrencyKey
	if ck, ok := args.(ConcurrencyKeyer); ok && ckey == "" {
		ckey = ck.ConcurrencyKey()
	}
	fkey := o.FairKey
	if fk, ok := args.(FairKeyer); ok && fkey == "" {
		fkey = fk.FairKey()
	}
	for _, k := range []struct{ field, entry, key string }{
		{"ConcurrencyKey", ConcurrencyKeyMetadata, ckey}, {"FairKey", FairKeyMetadata, fkey}} {
		if k.key == "" {
			continue
		}
		if len(k.key) > MaxConcurrencyKeyBytes || !utf8.ValidString(k.key) || strings.IndexByte(k.key, 0) >= 0 {
			return prepared{}, &OptionError{Field: k.field, Msg: fmt.Sprintf("%q: must be 1..%d bytes of valid UTF-8 without NUL", truncate(k.key), MaxConcurrencyKeyBytes)}
		}
		m := make(map[string]string, len(o.Metadata)+1)
		maps.Copy(m, o.Metadata)
		m[k.entry] = k.key
		o.Metadata = m
	}
	metadata, err := encodeMetadata(o.Metadata)
	if err != nil {
		return prepared{}, err
	}
	tags, err := prepareTags(o.Tags)
	if err != nil {
		return prepared{}, err
	}
	p := prepared{metadata: metadata, tags: tags, args: args, uniqueOpts: o.Unique, queue: o.Queue, kind: kind, version: int32(args.PayloadVersion()),
		priority: int16(o.Priority), delayUs: o.Delay.Microseconds(), maxAttempts: int32(o.MaxAttempts),
		leaseMs: int32(o.Lease.Milliseconds())}
	if o.Sequence != "" || o.SequenceOnFailure != "" {
		switch {
		case o.Sequence == "" || len(o.Sequence) > MaxConcurrencyKeyBytes || !utf8.ValidString(o.Sequence) || strings.IndexByte(o.Sequence, 0) >= 0:
			return prepared{}, &OptionError{Field: "Sequence", Msg: fmt.Sprintf("%q: must be 1..%d bytes of valid UTF-8 without NUL", truncate(o.Sequence), MaxConcurrencyKeyBytes)}
		case o.Unique != nil:
			return prepared{}, &OptionError{Field: "Sequence", Msg: "a job in a sequence cannot be unique"}
		case o.SequenceOnFailure != "" && o.SequenceOnFailure != SequenceBlock && o.SequenceOnFailure != SequenceSkip:
			return prepared{}, &OptionError{Field: "SequenceOnFailure", Msg: fmt.Sprintf("%q is not a policy", o.SequenceOnFailure)}
		}
		p.sequence, p.seqOnFail = o.Sequence, "block"
		if o.SequenceOnFailure == SequenceSkip {
			p.seqOnFail = "run"
		}
	}
	if !o.RunAt.IsZero() {
		t := o.RunAt
		p.runAt = &t
	}
	return p, nil
}

// Insert validates args and options and enqueues one job in its own transaction. Invalid
// args or options return a typed error (generics.PayloadError, *OptionError, ErrUnknownKind)
// and write nothing. The result holds the stored row; for a unique job whose key another job
// held, Duplicate is set and the row is that other job's (nothing was inserted).
func (c *Client) Insert(ctx context.Context, args generics.Args, opts *InsertOpts) (*InsertResult, error) {
	if opts != nil && opts.Sequence != "" {
		var res *InsertResult
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			res, err = c.insert(ctx, c.qtx(tx), args, opts)
			return err
		})
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	return c.insert(ctx, c.q, args, opts)
}

// InsertTx is Insert inside the caller's transaction: the job becomes visible, and its
// queue's workers are notified, only if tx commits. tx is a pgx.Tx, or a database/sql
// transaction adapted with SQLTx. Invalid args or options return their error before anything
// is sent, so tx stays usable.
func (c *Client) InsertTx(ctx context.Context, tx Tx, args generics.Args, opts *InsertOpts) (*InsertResult, error) {
	if tx == nil {
		return nil, &OptionError{Field: "tx", Msg: "must not be nil"}
	}
	return c.insert(ctx, c.qtx(tx), args, opts)
}

func (c *Client) insert(ctx context.Context, q *gen.Queries, args generics.Args, opts *InsertOpts) (*InsertResult, error) {
	p, err := c.prepare(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	if p.sequence != "" {
		return c.insertSequenced(ctx, q, p)
	}
	if p.unique == nil {
		j, err := q.InsertPlainJob(ctx, gen.InsertPlainJobParams{
			Queue: p.queue, Kind: p.kind, Payload: p.payload, PayloadVersion: p.version, Priority: p.priority,
			RunAt: p.runAt, DelayUs: p.delayUs, MaxAttempts: p.maxAttempts, LeaseMs: p.leaseMs, Notify: p.dueNow(),
			Metadata: p.metadata, Tags: p.tags,
		})
		if err != nil {
			return nil, migrations.WrapNotMigrated(fmt.Errorf("tenure: insert %s: %w", p.kind, err))
		}
		r, err := rowFromGen(gen.TenureJob(*j))
		if err != nil {
			return nil, err
		}
		return &InsertResult{Job: r}, nil
	}
	arg := gen.InsertJobParams{
		Queue: p.queue, Kind: p.kind, Payload: p.payload, PayloadVersion: p.version, Priority: p.priority,
		RunAt: p.runAt, DelayUs: p.delayUs, MaxAttempts: p.maxAttempts, LeaseMs: p.leaseMs, Notify: p.dueNow(),
		Metadata: p.metadata, Tags: p.tags, UniqueFields: []string{},
	}
	if u := p.unique; u != nil {
		arg.IsUnique, arg.UniqueByArgs, arg.UniqueFields, arg.UniquePeriodMs = true, u.byArgs, u.fields, u.periodMs
		arg.UniqueStates = &u.states
		if u.byQueue {
			arg.UniqueQueue = &p.queue
		}
	}
	// A unique insert that finds its key held by a job that committed after the statement's
	// snapshot, or that left its unique states meanwhile, returns no row: run it again (each
	// statement takes a fresh snapshot under READ COMMITTED).
	for try := 1; ; try++ {
		j, err := q.InsertJob(ctx, arg)
		if errors.Is(err, pgx.ErrNoRows) && p.unique != nil && try < maxUniqueTries {
			continue
		}
		if err != nil {
			return nil, migrations.WrapNotMigrated(fmt.Errorf("tenure: insert %s: %w", p.kind, err))
		}
		r, err := rowFromGen(insertedJob(*j))
		if err != nil {
			return nil, err
		}
		return &InsertResult{Job: r, Duplicate: j.Duplicate}, nil
	}
}

// maxUniqueTries bounds the runs of a unique insert that keeps losing races (each lost race
// means the key changed hands between two statements).
const maxUniqueTries = 10

func insertedJob(j gen.InsertJobRow) gen.TenureJob {
	return gen.TenureJob{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, PayloadVersion: j.PayloadVersion,
		State: j.State, Priority: j.Priority, RunAt: j.RunAt, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		LeaseMs: j.LeaseMs, LockedBy: j.LockedBy, LockedUntil: j.LockedUntil, ClaimToken: j.ClaimToken,
		Generation: j.Generation, AttemptedAt: j.AttemptedAt, LastErrorCode: j.LastErrorCode, Errors: j.Errors,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt, CancelRequestedAt: j.CancelRequestedAt,
		Metadata: j.Metadata, UniqueKey: j.UniqueKey, UniqueStates: j.UniqueStates, Tags: j.Tags, Output: j.Output,
		Snoozes: j.Snoozes, WorkflowID: j.WorkflowID, TaskName: j.TaskName, SequenceKey: j.SequenceKey,
		DepsPending: j.DepsPending, HasDependents: j.HasDependents}
}

// InsertMany validates every job first (one bad job rejects the whole call, writing nothing)
// and enqueues them all in one transaction, in as few round trips as possible. It returns one
// result per job, in input order, as Insert does: the stored row, or for a unique job whose key
// was held (by a stored job, or by an earlier job of the same call) Duplicate and the holder's
// row. For bulk loads that need neither the rows nor uniqueness, InsertManyFast is faster.
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]*InsertResult, error) {
	all, err := c.prepareMany(ctx, params)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	var several bool // statements that must commit together: unique or sequenced jobs
	for _, p := range all {
		several = several || p.unique != nil || p.sequence != ""
	}
	if len(all) <= insertChunk && !several {
		return c.insertMany(ctx, c.q, all)
	}
	var res []*InsertResult
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		res, err = c.insertMany(ctx, c.qtx(tx), all)
		return err
	})
	return res, err
}

// InsertManyTx is InsertMany inside the caller's transaction (a pgx.Tx, or a database/sql
// transaction adapted with SQLTx). Invalid jobs return their error before anything is sent,
// so tx stays usable.
func (c *Client) InsertManyTx(ctx context.Context, tx Tx, params []InsertManyParams) ([]*InsertResult, error) {
	if tx == nil {
		return nil, &OptionError{Field: "tx", Msg: "must not be nil"}
	}
	all, err := c.prepareMany(ctx, params)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	return c.insertMany(ctx, c.qtx(tx), all)
}

func (c *Client) prepareMany(ctx context.Context, params []InsertManyParams) ([]prepared, error) {
	all := make([]prepared, len(params))
	for i, p := range params {
		pp, err := c.prepare(ctx, p.Args, p.Opts)
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		all[i] = pp
	}
	return all, nil
}

// insertMany writes the plain jobs with InsertJobs, the unique ones with InsertUniqueJobs and
// the sequenced ones with insertSequencedMany. With unique or sequenced jobs q runs inside a
// transaction, so the call stays all or nothing.
func (c *Client) insertMany(ctx context.Context, q *gen.Queries, all []prepared) ([]*InsertResult, error) {
	res := make([]*InsertResult, len(all))
	var plain, unique, sequenced []int // indexes into all
	for i, p := range all {
		switch {
		case p.sequence != "":
			sequenced = append(sequenced, i)
		case p.unique != nil:
			unique = append(unique, i)
		default:
			plain = append(plain, i)
		}
	}
	if len(sequenced) > 0 {
		if err := c.insertSequencedMany(ctx, q, all, sequenced, res); err != nil {
			return nil, err
		}
	}
	for start := 0; start < len(plain); start += insertChunk {
		if err := c.insertPlain(ctx, q, all, plain[start:min(start+insertChunk, len(plain))], res); err != nil {
			return nil, err
		}
	}
	for start := 0; start < len(unique); start += insertChunk {
		if err := c.insertUnique(ctx, q, all, unique[start:min(start+insertChunk, len(unique))], res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// manyArgs are the per-row columns both batch statements take.
type manyArgs struct {
	queues, kinds       []string
	payloads, metadata  [][]byte
	tags                [][]byte
	versions            []int32
	priorities          []int16
	runAtUs, delayUs    []int64
	maxAttempts, leases []int32
	notify              []string
}

func buildManyArgs(all []prepared, idx []int) (manyArgs, error) {
	n := len(idx)
	a := manyArgs{queues: make([]string, n), kinds: make([]string, n), payloads: make([][]byte, n),
		metadata: make([][]byte, n), tags: make([][]byte, n), versions: make([]int32, n), priorities: make([]int16, n),
		runAtUs: make([]int64, n), delayUs: make([]int64, n), maxAttempts: make([]int32, n), leases: make([]int32, n)}
	notify := map[string]bool{}
	for i, k := range idx {
		p := &all[k]
		if !notify[p.queue] && p.dueNow() {
			notify[p.queue] = true
			a.notify = append(a.notify, p.queue)
		}
		a.queues[i], a.kinds[i], a.payloads[i] = p.queue, p.kind, p.payload
		a.versions[i], a.priorities[i] = p.version, p.priority
		if p.runAt != nil {
			a.runAtUs[i] = p.runAt.UnixMicro()
			if a.runAtUs[i] == 0 {
				a.runAtUs[i] = 1 // the epoch itself; 0 is reserved for "now"
			}
		}
		a.delayUs[i], a.maxAttempts[i], a.leases[i] = p.delayUs, p.maxAttempts, p.leaseMs
		a.metadata[i] = p.metadata
		tags, err := json.Marshal(p.tags)
		if err != nil {
			return manyArgs{}, err
		}
		a.tags[i] = tags
	}
	return a, nil
}

func (c *Client) insertPlain(ctx context.Context, q *gen.Queries, all []prepared, idx []int, res []*InsertResult) error {
	a, err := buildManyArgs(all, idx)
	if err != nil {
		return err
	}
	got, err := q.InsertJobs(ctx, gen.InsertJobsParams{Queues: a.queues, Kinds: a.kinds, Payloads: a.payloads,
		PayloadVersions: a.versions, Priorities: a.priorities, RunAtUs: a.runAtUs, DelayUs: a.delayUs,
		MaxAttempts: a.maxAttempts, LeaseMs: a.leases, Metadata: a.metadata, Tags: a.tags, NotifyQueues: a.notify})
	if err != nil {
		return migrations.WrapNotMigrated(fmt.Errorf("tenure: insert many: %w", err))
	}
	if len(got) != len(idx) {
		return fmt.Errorf("tenure: insert many: %d rows inserted, %d expected", len(got), len(idx))
	}
	for i, k := range idx {
		r, err := rowFromGen(gen.TenureJob(*got[i]))
		if err != nil {
			return err
		}
		res[k] = &InsertResult{Job: r}
	}
	return nil
}

// insertUnique inserts unique jobs (idx, in input order). Of several jobs of the call with one
// key, the first is inserted and the later ones are its duplicates; a job whose key changed
// hands between the statement's snapshot and its insert is run again.
func (c *Client) insertUnique(ctx context.Context, q *gen.Queries, all []prepared, idx []int, res []*InsertResult) error {
	for try := 1; len(idx) > 0; try++ {
		if try > maxUniqueTries {
			return fmt.Errorf("tenure: insert many: unique keys kept changing hands after %d tries", maxUniqueTries)
		}
		a, err := buildManyArgs(all, idx)
		if err != nil {
			return err
		}
		arg := gen.InsertUniqueJobsParams{Queues: a.queues, Kinds: a.kinds, Payloads: a.payloads,
			PayloadVersions: a.versions, Priorities: a.priorities, RunAtUs: a.runAtUs, DelayUs: a.delayUs,
			MaxAttempts: a.maxAttempts, LeaseMs: a.leases, Metadata: a.metadata, Tags: a.tags, NotifyQueues: a.notify}
		for i, k := range idx {
			u := all[k].unique
			fields, err := json.Marshal(u.fields)
			if err != nil {
				return err
			}
			arg.Ords = append(arg.Ords, int32(i))
			arg.UniqueStates = append(arg.UniqueStates, u.states)
			arg.UniqueByQueue = append(arg.UniqueByQueue, u.byQueue)
			arg.UniqueByArgs = append(arg.UniqueByArgs, u.byArgs)
			arg.UniqueFields = append(arg.UniqueFields, fields)
			arg.UniquePeriodMs = append(arg.UniquePeriodMs, u.periodMs)
		}
		rows, err := q.InsertUniqueJobs(ctx, arg)
		if err != nil {
			return migrations.WrapNotMigrated(fmt.Errorf("tenure: insert many: %w", err))
		}
		if len(rows) < len(idx) {
			return fmt.Errorf("tenure: insert many: %d rows returned, at least %d expected", len(rows), len(idx))
		}
		inserted := map[string]int64{} // key -> id of the job this statement inserted for it
		byOrd := make([]*gen.InsertUniqueJobsRow, len(idx))
		for i := range rows {
			r := rows[i]
			switch {
			case r.Ord < 0:
				inserted[string(r.UniqueKey)] = r.ID
			case int(r.Ord) < len(idx) && byOrd[r.Ord] == nil:
				byOrd[r.Ord] = r
			default:
				return fmt.Errorf("tenure: insert many: unexpected row for input %d", r.Ord)
			}
		}
		type decided struct {
			k         int // index into all
			id        int64
			duplicate bool
		}
		var again []int
		var done []decided
		var ids []int64
		first := map[int64]bool{}   // inserted ids already reported as inserted
		for ord, r := range byOrd { // input order
			if r == nil {
				return fmt.Errorf("tenure: insert many: no row for input %d", ord)
			}
			k := idx[ord]
			if id, ok := inserted[string(r.UniqueKey)]; ok {
				// The first input with the key (in input order) is the one inserted.
				done = append(done, decided{k: k, id: id, duplicate: first[id]})
				if !first[id] {
					ids = append(ids, id)
				}
				first[id] = true
			} else if r.ID != 0 {
				done = append(done, decided{k: k, id: r.ID, duplicate: true})
				ids = append(ids, r.ID)
			} else {
				again = append(again, k)
			}
		}
		// The rows, read in the inserting transaction: its own inserts, and the holders (a
		// holder deleted since the insert's snapshot is gone: its input runs again).
		stored, err := q.GetJobs(ctx, ids)
		if err != nil {
			return fmt.Errorf("tenure: insert many: %w", err)
		}
		byID := make(map[int64]*generics.JobRow, len(stored))
		for _, j := range stored {
			if byID[j.ID], err = rowFromGen(*j); err != nil {
				return err
			}
		}
		for _, d := range done {
			if row, ok := byID[d.id]; ok {
				res[d.k] = &InsertResult{Job: row, Duplicate: d.duplicate}
			} else {
				again = append(again, d.k)
			}
		}
		slices.Sort(again) // input order: of several with one key, the first is inserted
		idx = again
	}
	return nil
}

// Get returns the job with the given id, ErrNotFound, or ErrCorruptRow when the stored row
// cannot be decoded.
func (c *Client) Get(ctx context.Context, id int64) (*generics.JobRow, error) {
	j, err := c.q.GetJob(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return rowFromGen(*j)
}

// AttemptTimeout is the handler timeout of j's kind as the workers publish it (tenure.kinds):
// the timeout declared by the worker that runs j (j.LockedBy) when it publishes the kind, else
// the largest any worker publishes; 0 when no worker publishes the kind. An attempt running
// past it is cancelled by its worker (TIMEOUT).
func (c *Client) AttemptTimeout(ctx context.Context, j *generics.JobRow) (time.Duration, error) {
	ms, err := c.q.KindTimeout(ctx, gen.KindTimeoutParams{WorkerID: j.LockedBy, Kind: j.Kind})
	if err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ListParams filters and pages List. Zero fields match everything.
type ListParams struct {
	State     generics.JobState
	Kind      string
	Queue     string
	ErrorCode string
	// Tags, when not empty, keeps the jobs that carry every one of these tags (read through
	// the tags index). Each must be valid by ValidTag.
	Tags []string
	// AfterID continues a listing: pass the previous page's NextAfterID.
	AfterID int64
	// Limit is the page size, 1..1000; default 100.
	Limit int
}

// Page is one page of List.
type Page struct {
	Jobs []*generics.JobRow
	// NextAfterID is the AfterID of the next page, or 0 when this was the last page.
	NextAfterID int64
}

// List returns jobs matching p in id order, one page at a time. A row that cannot be decoded
// fails the page with ErrCorruptRow naming its id (page past it with AfterID).
func (c *Client) List(ctx context.Context, p ListParams) (*Page, error) {
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Limit < 1 || p.Limit > 1000 {
		return nil, &OptionError{Field: "Limit", Msg: "must be within 1..1000"}
	}
	if p.State != "" && !p.State.Valid() {
		return nil, &OptionError{Field: "State", Msg: fmt.Sprintf("unknown state %q", p.State)}
	}
	arg := gen.ListJobsParams{AfterID: p.AfterID, MaxRows: int32(p.Limit)}
	if p.State != "" {
		arg.State = gen.NullTenureJobState{TenureJobState: gen.TenureJobState(p.State), Valid: true}
	}
	arg.Kind, arg.Queue, arg.ErrorCode = nonEmpty(p.Kind), nonEmpty(p.Queue), nonEmpty(p.ErrorCode)
	var rows []*gen.TenureJob
	var err error
	if len(p.Tags) > 0 {
		tags, terr := prepareTags(p.Tags)
		if terr != nil {
			return nil, terr
		}
		rows, err = c.q.ListJobsTagged(ctx, gen.ListJobsTaggedParams{Tags: tags, State: arg.State, Kind: arg.Kind,
			Queue: arg.Queue, ErrorCode: arg.ErrorCode, AfterID: arg.AfterID, MaxRows: arg.MaxRows})
	} else {
		rows, err = c.q.ListJobs(ctx, arg)
	}
	if err != nil {
		return nil, err
	}
	page := &Page{Jobs: make([]*generics.JobRow, len(rows))}
	for i, r := range rows {
		if page.Jobs[i], err = rowFromGen(*r); err != nil {
			return nil, err
		}
	}
	if len(rows) == p.Limit {
		page.NextAfterID = rows[len(rows)-1].ID
	}
	return page, nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
