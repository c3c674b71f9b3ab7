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
		})
	}
	register(Name, "", fmt.Sprintf("riverbench's throughput settings: FetchCooldown=%s, FetchPollInterval=%s",
		RiverFetchCooldown, RiverFetchPollInterval), RiverFetchCooldown, RiverFetchPollInterval)
	register(NameDefault, Name, fmt.Sprintf("River's client defaults: FetchCooldown and FetchPollInterval left unset (%s and %s)",
		river.FetchCooldownDefault, river.FetchPollIntervalDefault), 0, 0)
}

type riverSystem struct {
	name     string
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	opts     sut.Options
	batchAPI string
	// cooldown and poll are the configured fetch settings; 0 = unset (River's default).
	cooldown, poll time.Duration
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
	cfg := &river.Config{
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
		Logger:            logger,
		Workers:           workers,
	}
	if opts.Workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: opts.Workers}}
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
		cooldown: cooldown, poll: poll}, nil
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
	return map[string]string{
		"MaxWorkers":        strconv.Itoa(s.opts.Workers),
		"FetchCooldown":     fetchSetting(s.cooldown, river.FetchCooldownDefault),
		"FetchPollInterval": fetchSetting(s.poll, river.FetchPollIntervalDefault),
		"bulk insert API":   s.batchAPI,
		"pool MaxConns":     strconv.Itoa(int(s.pool.Config().MaxConns)),
	}
}

func fetchSetting(set, def time.Duration) string {
	if set == 0 {
		return def.String() + " (River default, unset)"
	}
	return set.String()
}
