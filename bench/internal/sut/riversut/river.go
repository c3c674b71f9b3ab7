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

func init() {
	sut.Register(&sut.Driver{
		Name:       "river",
		QueueTable: "public.river_job",
		BatchAPIs:  []string{RiverBatchFast, RiverBatchReturning},
		Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
			m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
			if err != nil {
				return err
			}
			_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
			return err
		},
		New: newRiver,
		SchemaVersion: func(ctx context.Context, pool *pgxpool.Pool) (string, error) {
			var v int
			err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM river_migration`).Scan(&v)
			return strconv.Itoa(v), err
		},
	})
}

type riverSystem struct {
	pool     *pgxpool.Pool
	client   *river.Client[pgx.Tx]
	opts     sut.Options
	batchAPI string
}

func newRiver(_ context.Context, opts sut.Options) (sut.System, error) {
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
		logger = sut.StderrLogger("river")
	}
	cfg := &river.Config{
		FetchCooldown:     RiverFetchCooldown,
		FetchPollInterval: RiverFetchPollInterval,
		Logger:            logger,
		Workers:           workers,
	}
	if opts.Workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: opts.Workers}}
	}
	client, err := river.NewClient(riverpgxv5.New(opts.Pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river: new client: %w", err)
	}
	api := opts.BatchAPI
	if api == "" {
		api = RiverBatchFast
	}
	if api != RiverBatchFast && api != RiverBatchReturning {
		return nil, fmt.Errorf("river: unknown batch API %q", api)
	}
	return &riverSystem{pool: opts.Pool, client: client, opts: opts, batchAPI: api}, nil
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
		"FetchCooldown":     RiverFetchCooldown.String(),
		"FetchPollInterval": RiverFetchPollInterval.String(),
		"bulk insert API":   s.batchAPI,
		"pool MaxConns":     strconv.Itoa(int(s.pool.Config().MaxConns)),
	}
}
