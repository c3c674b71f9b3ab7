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

// TenureBatchInsertMany is Tenure's one bulk insert API.
const TenureBatchInsertMany = "InsertMany"

// Driver names: "tenure" runs the library defaults (the worker's own transactions commit
// durably, with the server's synchronous_commit); "tenure-async" is the same with
// worker.Config.AsynchronousCommit = true, so claims, heartbeats, finishes and reclaims commit
// with synchronous_commit=off (faster; a server crash can lose their last fraction of a second).
const (
	Name      = "tenure"
	NameAsync = "tenure-async"
)

func init() {
	register := func(name, variantOf, desc string, async bool) {
		sut.Register(&sut.Driver{
			Name:            name,
			Family:          "tenure",
			WorkerVariantOf: variantOf,
			Description:     desc,
			QueueTable:      "tenure.jobs",
			BatchAPIs:       []string{TenureBatchInsertMany},
			Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
				_, err := migrations.Up(ctx, pool)
				return err
			},
			New: func(ctx context.Context, opts sut.Options) (sut.System, error) {
				return newTenure(ctx, name, async, opts)
			},
			SchemaVersion: func(context.Context, *pgxpool.Pool) (string, error) {
				return strconv.Itoa(migrations.Latest()), nil
			},
		})
	}
	register(Name, "", "library defaults: the worker's own transactions (claims, heartbeats, finishes, "+
		"reclaims) and inserts commit with the server's synchronous_commit, durably, like River's", false)
	register(NameAsync, Name, "tenure with worker.Config{AsynchronousCommit: true}: the worker's own "+
		"transactions commit with synchronous_commit=off (inserts keep the server's setting)", true)
}

type tenureSystem struct {
	name   string
	async  bool
	pool   *pgxpool.Pool
	client *jobs.Client
	w      *worker.Worker
	opts   sut.Options
	insert *jobs.InsertOpts
}

func newTenure(_ context.Context, name string, async bool, opts sut.Options) (sut.System, error) {
	client, err := jobs.NewClient(opts.Pool, &jobs.Config{})
	if err != nil {
		return nil, fmt.Errorf("%s: new client: %w", name, err)
	}
	s := &tenureSystem{name: name, async: async, pool: opts.Pool, client: client, opts: opts,
		insert: &jobs.InsertOpts{Queue: "default"}}
	if opts.BatchAPI != "" && opts.BatchAPI != TenureBatchInsertMany {
		return nil, fmt.Errorf("%s: unknown batch API %q", name, opts.BatchAPI)
	}
	if opts.Workers > 0 {
		logger := opts.Logger
		if logger == nil {
			logger = sut.StderrLogger(name)
		}
		w, err := worker.New(opts.Pool, &worker.Config{
			Queues:             map[string]worker.QueueConfig{"default": {Concurrency: opts.Workers}},
			Logger:             logger,
			AsynchronousCommit: async,
		})
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
	return map[string]string{
		"Concurrency":        strconv.Itoa(s.opts.Workers),
		"AsynchronousCommit": strconv.FormatBool(s.async) + asyncNote[s.async],
		"other settings":     "library defaults (incl. the worker's private engine pool, default size)",
		"bulk insert API":    TenureBatchInsertMany,
		"pool MaxConns":      strconv.Itoa(int(s.pool.Config().MaxConns)),
	}
}

var asyncNote = map[bool]string{
	false: " (library default: the worker's own transactions wait for their WAL flush)",
	true:  " (the worker's own transactions commit with synchronous_commit=off)",
}
