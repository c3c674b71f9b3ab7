// Package tenuresut registers the Tenure driver with sut.
package tenuresut

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"

	"github.com/tenureq/tenure/bench/internal/sut"
)

// Tenure's bulk insert APIs: InsertMany (the default everywhere: INSERT from arrays, returns the
// jobs) and InsertManyFast (COPY, returns a count; bulk-enqueue pairs it with River's
// InsertManyFast, InsertMany with River's InsertMany).
const (
	TenureBatchInsertMany     = "InsertMany"
	TenureBatchInsertManyFast = "InsertManyFast"
)

// Driver names: "tenure" runs the library defaults (the worker's own transactions commit
// durably, with the server's synchronous_commit); "tenure-async" is the same with
// worker.Config.AsynchronousCommit = true, so claims, heartbeats, finishes and reclaims commit
// with synchronous_commit=off (faster; a server crash can lose their last fraction of a second).
//
// "tenure-ahead" is the defaults with QueueConfig.ClaimAhead = Concurrency: a queue of short
// handlers claims, while its slots are busy, the jobs they are expected to free slots for
// within a claim's round trip (opt-in: it lets a claim take more than the free slots).
const (
	Name      = "tenure"
	NameAsync = "tenure-async"
	NameAhead = "tenure-ahead"
)

func init() {
	register := func(name, variantOf, desc string, async, ahead bool) {
		sut.Register(&sut.Driver{
			Name:            name,
			Family:          "tenure",
			WorkerVariantOf: variantOf,
			Description:     desc,
			QueueTable:      "tenure.jobs",
			BatchAPIs:       []string{TenureBatchInsertMany, TenureBatchInsertManyFast},
			Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
				_, err := migrations.Up(ctx, pool)
				return err
			},
			New: func(ctx context.Context, opts sut.Options) (sut.System, error) {
				return newTenure(ctx, name, async, ahead, opts)
			},
			SchemaVersion: func(context.Context, *pgxpool.Pool) (string, error) {
				return strconv.Itoa(migrations.Latest()), nil
			},
			PeakPool:   peakPool,
			PeakKeys:   peakKeys,
			CeilingSQL: ceilingSQL,
		})
	}
	register(Name, "", "library defaults: the worker's own transactions (claims, heartbeats, finishes, "+
		"reclaims) and inserts commit with the server's synchronous_commit, durably, like River's", false, false)
	register(NameAsync, Name, "tenure with worker.Config{AsynchronousCommit: true}: the worker's own "+
		"transactions commit with synchronous_commit=off (inserts keep the server's setting)", true, false)
	register(NameAhead, Name, "tenure with worker.QueueConfig{ClaimAhead: Concurrency}: jobs claimed while "+
		"the slots are busy start as slots free (opt-in; durable commits as the defaults)", false, true)
}

// Peak throughput settings: what docs/guide.md ("Peak throughput settings") tells a user who
// wants the most jobs/s of short handlers from one worker process, measured with
// `go run ./cmd/compare -scenarios peak-burn-down,peak-steady -systems tenure -tune tenure:...`
// (bench/README.md, "Peak"). Everything not listed keeps the library default.
const (
	PeakConcurrency   = 2000
	PeakMaxClaimBatch = 1000
	PeakClaimers      = 2
	PeakFinishers     = 2
	PeakFinishBatch   = 2000
)

// peakKeys are the -tune keys of the Tenure drivers.
var peakKeys = map[string]string{
	"concurrency": "QueueConfig.Concurrency",
	"claimbatch":  "Config.MaxClaimBatch",
	"claimers":    "QueueConfig.Claimers",
	"finishers":   "Config.Finishers",
	"finishbatch": "Config.MaxFinishBatch",
	"linger":      "Config.FinishLinger (a Go duration; negative disables)",
	"engine":      "Config.EngineConns (default: the library's, 3 + finishers + claimers)",
	"pool":        "MaxConns of the shared pool (default: the connection cap less the engine pool and the LISTEN session)",
}

// peakConfig is the worker configuration of the peak scenarios, with tune applied.
type peakConfig struct {
	concurrency, claimBatch, claimers, finishers, finishBatch, engine, pool int
	linger                                                                  time.Duration
}

func parsePeak(tune map[string]string) (peakConfig, error) {
	p := peakConfig{concurrency: PeakConcurrency, claimBatch: PeakMaxClaimBatch, claimers: PeakClaimers,
		finishers: PeakFinishers, finishBatch: PeakFinishBatch}
	ints := map[string]*int{"concurrency": &p.concurrency, "claimbatch": &p.claimBatch, "claimers": &p.claimers,
		"finishers": &p.finishers, "finishbatch": &p.finishBatch, "engine": &p.engine, "pool": &p.pool}
	for k, v := range tune {
		if ptr, ok := ints[k]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return p, fmt.Errorf("tenure: tune %s=%q: want a positive integer", k, v)
			}
			*ptr = n
		} else if k == "linger" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return p, fmt.Errorf("tenure: tune linger=%q: %w", v, err)
			}
			p.linger = d
		} else {
			return p, fmt.Errorf("tenure: unknown tune key %q", k)
		}
	}
	if p.engine == 0 {
		p.engine = 3 + p.finishers + p.claimers // the library's default for one queue
	}
	return p, nil
}

// peakPool: the shared pool gets what the cap leaves after the worker's private engine pool
// and the LISTEN session it takes out of that pool (the pool may then open another).
func peakPool(connCap int, tune map[string]string) (int32, error) {
	p, err := parsePeak(tune)
	if err != nil {
		return 0, err
	}
	pool := p.pool
	if pool == 0 {
		pool = connCap - p.engine - 1
	}
	if pool < 2 || pool+p.engine+1 > connCap {
		return 0, fmt.Errorf("tenure: shared pool %d + engine pool %d + LISTEN 1 does not fit the cap of %d connections (shared pool needs >= 2)",
			pool, p.engine, connCap)
	}
	return int32(pool), nil
}

// ceilingSQL inserts what InsertMany stores for the bench's jobs (queue default, kind bench,
// payload {"pad", "seq"}, version 1, priority 2, due now, 25 attempts, 30 s lease, no metadata
// or tags), server-side.
const ceilingSQL = `INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags)
SELECT 'default', 'bench', jsonb_build_object('pad', $1::text, 'seq', g), 1, 2, now(), 25, 30000, '{}'::jsonb, '{}'::text[]
FROM generate_series($2::bigint, $3::bigint) AS g`

type tenureSystem struct {
	name   string
	async  bool
	pool   *pgxpool.Pool
	client *jobs.Client
	w      *worker.Worker
	opts   sut.Options
	insert *jobs.InsertOpts
	peak   *peakConfig
}

func newTenure(_ context.Context, name string, async, ahead bool, opts sut.Options) (sut.System, error) {
	client, err := jobs.NewClient(opts.Pool, &jobs.Config{})
	if err != nil {
		return nil, fmt.Errorf("%s: new client: %w", name, err)
	}
	s := &tenureSystem{name: name, async: async, pool: opts.Pool, client: client, opts: opts,
		insert: &jobs.InsertOpts{Queue: "default"}}
	if opts.BatchAPI != "" && opts.BatchAPI != TenureBatchInsertMany && opts.BatchAPI != TenureBatchInsertManyFast {
		return nil, fmt.Errorf("%s: unknown batch API %q", name, opts.BatchAPI)
	}
	if opts.Peak {
		p, err := parsePeak(opts.Tune)
		if err != nil {
			return nil, err
		}
		s.peak = &p
	}
	if opts.Workers > 0 || opts.Peak {
		logger := opts.Logger
		if logger == nil {
			logger = sut.StderrLogger(name)
		}
		cfg := &worker.Config{
			Queues:             map[string]worker.QueueConfig{"default": {Concurrency: opts.Workers}},
			Logger:             logger,
			AsynchronousCommit: async,
		}
		if ahead {
			cfg.Queues["default"] = worker.QueueConfig{Concurrency: opts.Workers, ClaimAhead: opts.Workers}
		}
		if p := s.peak; p != nil {
			cfg.Queues = map[string]worker.QueueConfig{"default": {Concurrency: p.concurrency, Claimers: p.claimers}}
			cfg.MaxClaimBatch, cfg.Finishers, cfg.MaxFinishBatch = p.claimBatch, p.finishers, p.finishBatch
			cfg.EngineConns, cfg.FinishLinger = p.engine, p.linger
		}
		w, err := worker.New(opts.Pool, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: new worker: %w", name, err)
		}
		onStart, onDone, work := opts.OnStart, opts.OnDone, opts.Work
		err = worker.Register(w, func(ctx context.Context, job *generics.Job[sut.BenchArgs]) error {
			if onStart != nil {
				onStart(&job.Args)
			}
			if work > 0 {
				time.Sleep(work)
			}
			if onDone != nil {
				onDone(&job.Args)
			}
			return nil
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: register: %w", name, err)
		}
		s.w = w
	}
	return s, nil
}

func (s *tenureSystem) Insert(ctx context.Context, args sut.BenchArgs) error {
	_, err := s.client.Insert(ctx, args, s.insert)
	return err
}

func (s *tenureSystem) InsertBatch(ctx context.Context, args []sut.BenchArgs) error {
	params := make([]jobs.InsertManyParams, len(args))
	for i := range args {
		params[i] = jobs.InsertManyParams{Args: args[i], Opts: s.insert}
	}
	if s.opts.BatchAPI == TenureBatchInsertManyFast {
		_, err := s.client.InsertManyFast(ctx, params)
		return err
	}
	_, err := s.client.InsertMany(ctx, params)
	return err
}

func (s *tenureSystem) Start(ctx context.Context) error {
	if s.w == nil {
		return fmt.Errorf("%s: no workers configured", s.name)
	}
	return s.w.Start(ctx)
}

func (s *tenureSystem) Stop(ctx context.Context) error {
	if s.w == nil {
		return nil
	}
	return s.w.Stop(ctx)
}

func (s *tenureSystem) Unfinished(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state IN ('ready', 'running')`).Scan(&n)
	return n, err
}

func (s *tenureSystem) Depth(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND run_at <= now()`).Scan(&n)
	return n, err
}

func (s *tenureSystem) Settings() map[string]string {
	if p := s.peak; p != nil {
		linger := "library default (20ms)"
		if p.linger != 0 {
			linger = p.linger.String()
		}
		return map[string]string{
			"Concurrency":        strconv.Itoa(p.concurrency),
			"Claimers":           strconv.Itoa(p.claimers),
			"MaxClaimBatch":      strconv.Itoa(p.claimBatch),
			"Finishers":          strconv.Itoa(p.finishers),
			"MaxFinishBatch":     strconv.Itoa(p.finishBatch),
			"FinishLinger":       linger,
			"EngineConns":        strconv.Itoa(p.engine),
			"AsynchronousCommit": strconv.FormatBool(s.async) + asyncNote[s.async],
			"other settings":     "library defaults",
			"bulk insert API":    s.batchAPI(),
			"pool MaxConns":      strconv.Itoa(int(s.pool.Config().MaxConns)),
			"connections":        fmt.Sprintf("shared pool %d + engine pool %d + 1 LISTEN session taken out of it", s.pool.Config().MaxConns, p.engine),
		}
	}
	return map[string]string{
		"Concurrency":        strconv.Itoa(s.opts.Workers),
		"AsynchronousCommit": strconv.FormatBool(s.async) + asyncNote[s.async],
		"other settings":     "library defaults (incl. the worker's private engine pool, default size)",
		"bulk insert API":    s.batchAPI(),
		"pool MaxConns":      strconv.Itoa(int(s.pool.Config().MaxConns)),
	}
}

func (s *tenureSystem) batchAPI() string {
	if s.opts.BatchAPI == "" {
		return TenureBatchInsertMany
	}
	return s.opts.BatchAPI
}

var asyncNote = map[bool]string{
	false: " (library default: the worker's own transactions wait for their WAL flush)",
	true:  " (the worker's own transactions commit with synchronous_commit=off)",
}
