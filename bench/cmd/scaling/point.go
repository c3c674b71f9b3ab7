package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/bench/internal/claimtrace"
	"github.com/tenureq/tenure/bench/internal/pgutil"
	"github.com/tenureq/tenure/bench/internal/procstat"
	"github.com/tenureq/tenure/bench/internal/sut"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// shape is what one point sets up and runs.
type shape struct {
	Ready    int `json:"ready"`    // ready jobs pre-inserted
	Finished int `json:"finished"` // succeeded rows pre-inserted (older than the ready ones)
	// FinishedSpan is how far back the finished rows' finished_at reach, evenly (0: 20 hours,
	// inside the default 24 h retention).
	FinishedSpan time.Duration `json:"finished_span_ns,omitempty"`
	Queues       int           `json:"queues"` // the ready jobs are spread round-robin over this many queues
	Slots        int           `json:"slots"`  // total Concurrency of the one worker
	// SharedSlots: Slots is a worker-wide pool the queues share (worker.Config.Slots), each
	// queue's Concurrency (its own cap) = Slots; else each queue has Slots/Queues (at least 1).
	SharedSlots bool `json:"shared_slots,omitempty"`
	Slice       int  `json:"slice"` // jobs measured
}

// Point is one measured point of a sweep.
type Point struct {
	X     int   `json:"x"` // the swept value
	Shape shape `json:"shape"`
	// PerQueueConcurrency is each queue's Concurrency (Slots/Queues, at least 1).
	PerQueueConcurrency int     `json:"per_queue_concurrency"`
	EngineConns         int     `json:"engine_conns"`
	PreloadS            float64 `json:"preload_s"`
	Jobs                int64   `json:"jobs"` // succeeded in the measured window
	ElapsedS            float64 `json:"elapsed_s"`
	JobsPerS            float64 `json:"jobs_per_s"`
	// Claim is the claim statement as the client sees it (pgx tracer on the engine pool), in
	// the measured window.
	Claim        claimtrace.Summary `json:"claim"`
	ClaimsByName map[string]int64   `json:"claims_by_name"`
	JobsPerClaim float64            `json:"jobs_per_claim"`
	// WorkerClaimP99Ms is worker.Stats().ClaimP99: includes the wait for an engine connection.
	WorkerClaimP99Ms float64 `json:"worker_claim_p99_ms"`
	// Server is the claim statement in pg_stat_statements over the measured window.
	Server      *pgutil.Statement  `json:"server_claim,omitempty"`
	Statements  []pgutil.Statement `json:"statements,omitempty"`
	PGCPUPer1k  float64            `json:"pg_cpu_s_per_1k"`
	CPUPer1k    float64            `json:"bench_cpu_s_per_1k"`
	Sizes       Sizes              `json:"sizes_after"`
	Explain     *Explain           `json:"explain,omitempty"`
	LoadBefore  string             `json:"loadavg_before"`
	LoadAfter   string             `json:"loadavg_after"`
	Error       string             `json:"error,omitempty"`
	StartedAt   time.Time          `json:"started_at"`
	ClaimErrors int64              `json:"claim_errors"`
}

// Sizes are the queue table's sizes and tuple counts.
type Sizes struct {
	TableBytes int64            `json:"table_bytes"` // heap only
	TotalBytes int64            `json:"total_bytes"` // heap + indexes + TOAST
	Indexes    map[string]int64 `json:"indexes"`
	Live       int64            `json:"n_live_tup"`
	Dead       int64            `json:"n_dead_tup"`
	Autovacuum int64            `json:"autovacuum_count"`
	Autoanalyz int64            `json:"autoanalyze_count"`
}

// Explain is EXPLAIN (ANALYZE, BUFFERS) of the last claim the worker ran, re-run (and rolled
// back) after the measurement on the same database with the engine's session settings.
type Explain struct {
	Statement string  `json:"statement"`
	ExecMs    float64 `json:"exec_ms"`
	Buffers   string  `json:"buffers"` // the top node's Buffers line
	Plan      string  `json:"plan"`
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// queueNames returns n queue names ("default" when n is 1, else q0000, q0001, ...).
func queueNames(n int) []string {
	if n == 1 {
		return []string{"default"}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("q%04d", i)
	}
	return out
}

// env is one fresh database on the server.
type env struct {
	c      *config
	name   string
	url    string
	logf   func(string, ...any)
	adminU string
}

func newEnv(ctx context.Context, c *config, adminURL, name string, logf func(string, ...any)) (*env, error) {
	if err := pgutil.CreateDatabase(ctx, adminURL, name); err != nil {
		return nil, err
	}
	u, err := pgutil.WithDatabase(adminURL, name)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, name: name, url: u, logf: logf, adminU: adminURL}
	pool, err := pgutil.NewPool(ctx, u, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return e, nil
}

func (e *env) drop() {
	if e.c.keepDBs {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pgutil.DropDatabase(ctx, e.adminU, e.name); err != nil {
		e.logf("drop %s: %v", e.name, err)
	}
}

// preloadChunk is the number of rows one pre-insert statement writes.
const preloadChunk = 250_000

// preload inserts s.Finished succeeded rows and then s.Ready ready jobs with server-side
// INSERT ... SELECT generate_series. Every column comes from a template job inserted first
// through jobs.Client.InsertMany (the API the applications use), so the rows are what the
// engine writes; only the payload's seq, the queue and, for finished rows, the fields the
// claim and the completion set (state, attempts, generation, claim_token, attempted_at,
// finished_at) differ. Ready jobs get run_at = created_at = one instant per 1,000 rows, 1 ms
// apart, in id order, in the past: what InsertMany batches of 1,000 give (a statement's now()
// per batch). One now() for every row would be wrong: the claim's watermark is a run_at, so
// a band whose jobs all share one run_at makes each claim re-walk every index entry the
// previous claims left behind. Then VACUUM (ANALYZE) and CHECKPOINT, as autovacuum and the
// checkpointer would have done to a backlog that built up over time.
func (e *env) preload(ctx context.Context, s shape, queues []string) error {
	pool, err := pgutil.NewPool(ctx, e.url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := jobs.NewClient(pool, &jobs.Config{})
	if err != nil {
		return err
	}
	pad := sut.Pad(e.c.payload)
	if _, err := client.InsertMany(ctx, []jobs.InsertManyParams{{Args: sut.BenchArgs{Pad: pad, Seq: 0}, Opts: &jobs.InsertOpts{Queue: queues[0]}}}); err != nil {
		return fmt.Errorf("template insert: %w", err)
	}
	var tid int64
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM tenure.jobs`).Scan(&tid); err != nil {
		return err
	}
	chunks := func(total int, what string, sql string, extra ...any) error {
		for lo := 1; lo <= total; lo += preloadChunk {
			hi := min(total, lo+preloadChunk-1)
			if _, err := pool.Exec(ctx, sql, append([]any{lo, hi, tid, pad, queues, total}, extra...)...); err != nil {
				return fmt.Errorf("pre-insert %s %d..%d: %w", what, lo, hi, err)
			}
			if total > 1_000_000 && (hi/preloadChunk)%4 == 0 {
				e.logf("    pre-inserted %d/%d %s rows", hi, total, what)
			}
		}
		return nil
	}
	// Finished rows: finished over the last FinishedSpan (default 20 hours, inside the default
	// 24 h retention), in id order, as the engine leaves them (CompleteMany keeps the claim
	// token, clears the lease).
	span := 20 * time.Hour
	if s.FinishedSpan > 0 {
		span = s.FinishedSpan
	}
	if s.Finished > 0 {
		err := chunks(s.Finished, "finished", `
INSERT INTO tenure.jobs (queue, kind, payload, payload_version, state, priority, run_at, attempts,
    max_attempts, lease_ms, claim_token, generation, attempted_at, created_at, updated_at, finished_at, metadata, tags)
SELECT ($5::text[])[1 + (g % cardinality($5::text[]))], t.kind, jsonb_build_object('pad', $4::text, 'seq', -g),
       t.payload_version, 'succeeded', t.priority, x.at, 1, t.max_attempts, t.lease_ms, gen_random_uuid(), 1,
       x.at, x.at, x.at, x.at, t.metadata, t.tags
FROM generate_series($1::bigint, $2::bigint) g
CROSS JOIN (SELECT * FROM tenure.jobs WHERE id = $3) t
CROSS JOIN LATERAL (SELECT now() - (($6::bigint - g)::float8 / $6::bigint * $7::float8) * interval '1 second' AS at) x`, span.Seconds())
		if err != nil {
			return err
		}
	}
	if s.Ready > 0 {
		err := chunks(s.Ready, "ready", `
INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags, created_at, updated_at)
SELECT ($5::text[])[1 + (g % cardinality($5::text[]))], t.kind, jsonb_build_object('pad', $4::text, 'seq', g),
       t.payload_version, t.priority, x.at, t.max_attempts, t.lease_ms, t.metadata, t.tags, x.at, x.at
FROM generate_series($1::bigint, $2::bigint) g
CROSS JOIN (SELECT * FROM tenure.jobs WHERE id = $3) t
CROSS JOIN LATERAL (SELECT now() - (($6::bigint - g) / 1000 + 1) * interval '1 millisecond' AS at) x`)
		if err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM tenure.jobs WHERE id = $1`, tid); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) tenure.jobs`); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CHECKPOINT`)
	return err
}

// readSizes reads the queue table's sizes and statistics.
func readSizes(ctx context.Context, conn *pgx.Conn) (Sizes, error) {
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	s := Sizes{Indexes: map[string]int64{}}
	err := conn.QueryRow(ctx, `SELECT pg_relation_size('tenure.jobs'), pg_total_relation_size('tenure.jobs'),
		coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0), coalesce(autovacuum_count, 0), coalesce(autoanalyze_count, 0)
		FROM pg_stat_user_tables WHERE schemaname = 'tenure' AND relname = 'jobs'`).
		Scan(&s.TableBytes, &s.TotalBytes, &s.Live, &s.Dead, &s.Autovacuum, &s.Autoanalyz)
	if err != nil {
		return s, err
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'tenure.jobs'::regclass`)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return s, err
		}
		s.Indexes[name] = n
	}
	return s, rows.Err()
}

// rig is a worker with a traced engine pool on one database.
type rig struct {
	app, eng    *pgxpool.Pool
	w           *worker.Worker
	tr          *claimtrace.Tracer
	handled     atomic.Int64
	engineConns int
	perQueue    int
}

// newRig builds the worker: queues of Slots/len(queues) slots each (at least 1), an engine
// pool made as the worker makes its private one (the engine's session settings) plus the
// claim tracer, of the library's default size (worker.EnginePoolSize) capped at
// -engine-conns-cap, with the engine's type plans (worker.RegisterEngineTypes). Until
// 2026-12-03 the sweep's pool lacked those plans, so every sweep before paid pgx's slow uuid
// encoding and nullable scans that the private pool does not.
// With shared, the queues share a pool of slots slots (mod sets worker.Config.Slots) and each
// queue's Concurrency is slots.
func newRig(ctx context.Context, c *config, dbURL string, queues []string, slots int, shared bool, mod func(*worker.Config)) (*rig, error) {
	r := &rig{tr: claimtrace.New()}
	r.perQueue = max(1, slots/len(queues))
	if shared {
		r.perQueue = slots
	}
	app, err := pgutil.NewPool(ctx, dbURL, 10)
	if err != nil {
		return nil, err
	}
	r.app = app
	qs := map[string]worker.QueueConfig{}
	for _, q := range queues {
		qs[q] = worker.QueueConfig{Concurrency: r.perQueue}
	}
	wc := &worker.Config{Queues: qs,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if mod != nil {
		mod(wc)
	}
	size, err := worker.EnginePoolSize(wc)
	if err != nil {
		app.Close()
		return nil, err
	}
	r.engineConns = min(size, c.engineCap)
	pc := app.Config().Copy()
	pc.MaxConns, pc.MinConns = int32(r.engineConns), 0
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	for k, v := range engineconf.Settings {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	pc.ConnConfig.Tracer = r.tr
	after := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		worker.RegisterEngineTypes(conn.TypeMap()) // as the private pool does
		if after != nil {
			return after(ctx, conn)
		}
		return nil
	}
	eng, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		app.Close()
		return nil, err
	}
	r.eng = eng
	wc.EnginePool = eng
	w, err := worker.New(app, wc)
	if err != nil {
		r.close()
		return nil, err
	}
	// The kind's default queue is one the worker serves (else the worker warns that "default"
	// is not served when the sweep names its queues q0000...; the jobs carry their queue).
	err = worker.Register(w, func(context.Context, *generics.Job[sut.BenchArgs]) error {
		r.handled.Add(1)
		return nil
	}, &worker.HandlerOptions{Queue: queues[0]})
	if err != nil {
		r.close()
		return nil, err
	}
	r.w = w
	return r, nil
}

func (r *rig) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return r.w.Stop(ctx)
}

func (r *rig) close() {
	if r.eng != nil {
		r.eng.Close()
	}
	if r.app != nil {
		r.app.Close()
	}
}

// runPoint measures one point on a fresh database: pre-insert, start the worker, time until
// Slice jobs have succeeded (fenced finishes landed), then read the statistics.
func runPoint(ctx context.Context, c *config, adminURL, dbName string, x int, s shape, logf func(string, ...any)) (*Point, error) {
	p := &Point{X: x, Shape: s, StartedAt: time.Now().UTC(), LoadBefore: loadavg()}
	e, err := newEnv(ctx, c, adminURL, dbName, logf)
	if err != nil {
		return nil, err
	}
	defer e.drop()
	queues := queueNames(s.Queues)
	t0 := time.Now()
	if err := e.preload(ctx, s, queues); err != nil {
		return nil, err
	}
	p.PreloadS = time.Since(t0).Seconds()
	var mod func(*worker.Config)
	if s.SharedSlots {
		mod = func(wc *worker.Config) { wc.Slots = s.Slots }
	}
	r, err := newRig(ctx, c, e.url, queues, s.Slots, s.SharedSlots, mod)
	if err != nil {
		return nil, err
	}
	defer r.close()
	p.PerQueueConcurrency, p.EngineConns = r.perQueue, r.engineConns
	cpu, err := pgutil.StartServerCPU(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer cpu.Close(context.Background())
	before := pgutil.Statements(ctx, e.url, 50)
	selfBefore := procstat.SelfCPU()
	cpu.Reset()
	stopProfile := startProfile(c, dbName, x, logf)
	start := time.Now()
	if err := r.w.Start(ctx); err != nil {
		return nil, err
	}
	var done int64
	for {
		// worker.Stats() costs more the more queues the worker serves (per-queue histograms):
		// polled every 10 ms it charged the many-queue points for the measurement itself. The
		// handler's own count is read until the slice has run, then Stats (the finishes landed).
		if r.handled.Load() < int64(s.Slice) && time.Since(start) <= c.pointLimit && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		done = r.w.Stats().Succeeded
		if done >= int64(s.Slice) {
			break
		}
		if time.Since(start) > c.pointLimit || ctx.Err() != nil {
			p.Error = fmt.Sprintf("only %d of %d jobs succeeded within %v", done, s.Slice, c.pointLimit)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stopProfile()
	st := r.w.Stats()
	p.Claim, p.ClaimsByName, p.ClaimErrors = r.tr.Total(), r.tr.ByName(), r.tr.Errors()
	pgCPU, _, cpuErr := cpu.Stop(ctx)
	selfCPU := procstat.SelfCPU() - selfBefore
	stopErr := r.stop()
	p.Jobs, p.ElapsedS = done, elapsed.Seconds()
	p.JobsPerS = float64(done) / elapsed.Seconds()
	p.WorkerClaimP99Ms = float64(st.ClaimP99) / float64(time.Millisecond)
	if st.Claims > 0 {
		p.JobsPerClaim = float64(st.Claimed) / float64(st.Claims)
	}
	if done > 0 {
		if cpuErr == nil && cpu.OK() {
			p.PGCPUPer1k = pgCPU.Seconds() / float64(done) * 1000
		}
		p.CPUPer1k = selfCPU.Seconds() / float64(done) * 1000
	}
	after := pgutil.Statements(ctx, e.url, 50)
	p.Statements = pgutil.StatementsSince(before, after, 8)
	for i := range p.Statements {
		if claimtrace.IsClaim(p.Statements[i].Query) {
			st := p.Statements[i]
			p.Server = &st
			break
		}
	}
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if p.Sizes, err = readSizes(ctx, conn); err != nil {
		return nil, err
	}
	if sql, args := r.tr.Last(); sql != "" {
		ex, err := explainClaim(ctx, conn, sql, args)
		if err != nil {
			logf("    explain: %v", err)
		} else {
			p.Explain = ex
		}
	}
	p.LoadAfter = loadavg()
	if stopErr != nil && p.Error == "" {
		p.Error = "worker stop: " + stopErr.Error()
	}
	return p, nil
}

var (
	execTimeRE = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)
	buffersRE  = regexp.MustCompile(`(?m)^\s*Buffers: (.*)$`)
)

// explainClaim runs EXPLAIN (ANALYZE, BUFFERS) of a claim statement with the engine's session
// settings inside a transaction it rolls back (the claim's UPDATE is not kept).
func explainClaim(ctx context.Context, conn *pgx.Conn, sql string, args []any) (*Explain, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for k, v := range engineconf.Settings {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		return nil, err
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	plan := strings.Join(lines, "\n")
	ex := &Explain{Statement: claimtrace.StatementName(sql), Plan: plan}
	if m := execTimeRE.FindStringSubmatch(plan); m != nil {
		ex.ExecMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := buffersRE.FindStringSubmatch(plan); m != nil {
		ex.Buffers = strings.TrimSpace(m[1])
	}
	if ex.ExecMs == 0 && ex.Buffers == "" {
		return ex, errors.New("no execution time in the plan")
	}
	return ex, nil
}

// startProfile starts the Go CPU profile of a point's measured window (-cpuprofile) and
// returns what stops it; without -cpuprofile it does nothing.
func startProfile(c *config, dbName string, x int, logf func(string, ...any)) func() {
	if c.cpuProfile == "" {
		return func() {}
	}
	sweep := dbName
	if parts := strings.Split(dbName, "_"); len(parts) >= 3 {
		sweep = parts[2]
	}
	name := fmt.Sprintf("%s-%s-%d.pprof", c.cpuProfile, sweep, x)
	f, err := os.Create(name)
	if err != nil {
		logf("    cpuprofile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		logf("    cpuprofile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		logf("    cpu profile: %s", name)
	}
}
