// Package riversut registers the River driver with sut.
package riversut

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tenureq/tenure/bench/internal/sut"
)

// River's documented throughput settings: the values River's own benchmark
// (cmd/river/riverbench, `river bench`) configures "to maximize job throughput", which it
// notes perform much better than the client defaults (FetchCooldown 100ms,
// FetchPollInterval 1s). MaxWorkers is set to the bench's worker count so both queues run
// the same number of concurrent handlers (riverbench itself uses 2,000).
const (
	RiverFetchCooldown     = 2 * time.Millisecond
	RiverFetchPollInterval = 20 * time.Millisecond
)

// River bulk insert APIs.
const (
	RiverBatchFast      = "InsertManyFast" // COPY FROM, returns a count (River's fastest bulk path)
	RiverBatchReturning = "InsertMany"     // INSERT ... RETURNING, returns the job rows
)

// Driver names: "river" runs with the throughput settings above; "river-default" leaves
// FetchCooldown and FetchPollInterval unset, i.e. River's client defaults
// (river.FetchCooldownDefault, river.FetchPollIntervalDefault).
const (
	Name        = "river"
	NameDefault = "river-default"
)

func init() {
	register := func(name, variantOf, desc string, cooldown, poll time.Duration) {
		sut.Register(&sut.Driver{
			Name:            name,
			Family:          "river",
			WorkerVariantOf: variantOf,
			Description:     desc,
			QueueTable:      "public.river_job",
			BatchAPIs:       []string{RiverBatchFast, RiverBatchReturning},
			Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
				m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
				if err != nil {
					return err
				}
				_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
				return err
			},
			New: func(ctx context.Context, opts sut.Options) (sut.System, error) {
				return newRiver(ctx, name, cooldown, poll, opts)
			},
			SchemaVersion: func(ctx context.Context, pool *pgxpool.Pool) (string, error) {
				var v int
				err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM river_migration`).Scan(&v)
				return strconv.Itoa(v), err
			},
			PeakPool:   peakPool,
			PeakKeys:   peakKeys,
			CeilingSQL: ceilingSQL,
		})
	}
	register(Name, "", fmt.Sprintf("riverbench's throughput settings: FetchCooldown=%s, FetchPollInterval=%s",
		RiverFetchCooldown, RiverFetchPollInterval), RiverFetchCooldown, RiverFetchPollInterval)
	register(NameDefault, Name, fmt.Sprintf("River's client defaults: FetchCooldown and FetchPollInterval left unset (%s and %s)",
		river.FetchCooldownDefault, river.FetchPollIntervalDefault), 0, 0)
}

// Peak settings: River as its own benchmark (`river bench`, cmd/river/riverbench) configures
// it: MaxWorkers 2,000, FetchCooldown 2 ms, FetchPollInterval 20 ms, the client's default
// (batch) completer, everything else River's default. riverbench opens its pool with pgxpool's
// default size (max(4, GOMAXPROCS): 4 on 2 CPUs); here the pool gets the connection cap less
// the one session River's listener takes out of it (Hijack), measured to be at least as fast
// as riverbench's own size on this machine (bench/README.md, "Peak").
const PeakMaxWorkers = 2000

var peakKeys = map[string]string{
	"maxworkers": "QueueConfig.MaxWorkers",
	"cooldown":   "Config.FetchCooldown (a Go duration)",
	"poll":       "Config.FetchPollInterval (a Go duration)",
	"pool":       "MaxConns of the pool (default: the connection cap less the listener's session)",
}

type riverPeak struct {
	maxWorkers, pool int
	cooldown, poll   time.Duration
}

func parsePeak(tune map[string]string) (riverPeak, error) {
	p := riverPeak{maxWorkers: PeakMaxWorkers, cooldown: RiverFetchCooldown, poll: RiverFetchPollInterval}
	for k, v := range tune {
		switch k {
		case "maxworkers", "pool":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return p, fmt.Errorf("river: tune %s=%q: want a positive integer", k, v)
			}
			if k == "pool" {
				p.pool = n
			} else {
				p.maxWorkers = n
			}
		case "cooldown", "poll":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return p, fmt.Errorf("river: tune %s=%q: want a positive duration", k, v)
			}
			if k == "cooldown" {
				p.cooldown = d
			} else {
				p.poll = d
			}
		default:
			return p, fmt.Errorf("river: unknown tune key %q", k)
		}
	}
	return p, nil
}

func peakPool(connCap int, tune map[string]string) (int32, error) {
	p, err := parsePeak(tune)
	if err != nil {
		return 0, err
	}
	pool := p.pool
	if pool == 0 {
		pool = connCap - 1
	}
	if pool < 2 || pool+1 > connCap {
		return 0, fmt.Errorf("river: pool %d + listener 1 does not fit the cap of %d connections (pool needs >= 2)", pool, connCap)
	}
	return int32(pool), nil
}

// ceilingSQL inserts what InsertManyFast stores for the bench's jobs (args {"pad", "seq"},
// kind bench, 25 attempts, priority 1, queue default, available now, no metadata or tags),
// server-side.
const ceilingSQL = `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, metadata, tags)
SELECT jsonb_build_object('pad', $1::text, 'seq', g), 'bench', 25, 1, 'default', 'available', now(), '{}'::jsonb, '{}'::varchar(255)[]
FROM generate_series($2::bigint, $3::bigint) AS g`

type riverSystem struct {
	name     string
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	opts     sut.Options
	batchAPI string
	// cooldown and poll are the configured fetch settings; 0 = unset (River's default).
	cooldown, poll time.Duration
	maxWorkers     int
	peak           bool
}

func newRiver(_ context.Context, name string, cooldown, poll time.Duration, opts sut.Options) (sut.System, error) {
	workers := river.NewWorkers()
	onStart, onDone, work := opts.OnStart, opts.OnDone, opts.Work
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[sut.BenchArgs]) error {
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
	}))
	logger := opts.Logger
	if logger == nil {
		logger = sut.StderrLogger(name)
	}
	maxWorkers := opts.Workers
	if opts.Peak {
		p, err := parsePeak(opts.Tune)
		if err != nil {
			return nil, err
		}
		maxWorkers, cooldown, poll = p.maxWorkers, p.cooldown, p.poll
	}
	cfg := &river.Config{
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
		Logger:            logger,
		Workers:           workers,
	}
	if maxWorkers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}}
	}
	client, err := river.NewClient(riverpgxv5.New(opts.Pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: new client: %w", name, err)
	}
	api := opts.BatchAPI
	if api == "" {
		api = RiverBatchFast
	}
	if api != RiverBatchFast && api != RiverBatchReturning {
		return nil, fmt.Errorf("%s: unknown batch API %q", name, api)
	}
	return &riverSystem{name: name, pool: opts.Pool, client: client, opts: opts, batchAPI: api,
		cooldown: cooldown, poll: poll, maxWorkers: maxWorkers, peak: opts.Peak}, nil
}

func (s *riverSystem) Insert(ctx context.Context, args sut.BenchArgs) error {
	_, err := s.client.Insert(ctx, args, nil)
	return err
}

func (s *riverSystem) InsertBatch(ctx context.Context, args []sut.BenchArgs) error {
	params := make([]river.InsertManyParams, len(args))
	for i := range args {
		params[i].Args = args[i]
	}
	var err error
	if s.batchAPI == RiverBatchReturning {
		_, err = s.client.InsertMany(ctx, params)
	} else {
		_, err = s.client.InsertManyFast(ctx, params)
	}
	return err
}

func (s *riverSystem) Start(ctx context.Context) error { return s.client.Start(ctx) }
func (s *riverSystem) Stop(ctx context.Context) error  { return s.client.Stop(ctx) }

func (s *riverSystem) Unfinished(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx,
		`SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&n)
	return n, err
}

func (s *riverSystem) Depth(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'available'`).Scan(&n)
	return n, err
}

func (s *riverSystem) Settings() map[string]string {
	m := map[string]string{
		"MaxWorkers":        strconv.Itoa(s.maxWorkers),
		"FetchCooldown":     fetchSetting(s.cooldown, river.FetchCooldownDefault),
		"FetchPollInterval": fetchSetting(s.poll, river.FetchPollIntervalDefault),
		"bulk insert API":   s.batchAPI,
		"pool MaxConns":     strconv.Itoa(int(s.pool.Config().MaxConns)),
	}
	if s.peak {
		m["completer"] = "the client's default (batch completer)"
		m["connections"] = fmt.Sprintf("pool %d + 1 listener session taken out of it", s.pool.Config().MaxConns)
	}
	return m
}

func fetchSetting(set, def time.Duration) string {
	if set == 0 {
		return def.String() + " (River default, unset)"
	}
	return set.String()
}
