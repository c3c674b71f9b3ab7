package worker_test

// Child-process plumbing for the chaos and effect tests.
//
// A test starts a worker in another process by re-executing the test binary with
// TENURE_CHILD set; TestMain sees it and runs childMain instead of the tests. The child reports
// progress as stdout lines ("claimed <id> <generation> <attempt> <token>", "effect-done <id>
// <generation> ...", "outcome <id> <generation> <transition> ...") so the parent can time its
// SIGKILL/SIGSTOP/SIGCONT, and reads commands from stdin ("go", "stats"). It exits when its
// stdin reaches EOF (the parent died) and stops gracefully on SIGTERM, printing "final-stats".
// Every child started with startChild is SIGKILLed and reaped in t.Cleanup.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/worker"
)

// Environment of a child process.
const (
	envChild        = "TENURE_CHILD"             // "worker" or "claim-uncommitted"
	envChildDB      = "TENURE_CHILD_DB"          // database URL
	envChildHandler = "TENURE_CHILD_HANDLER"     // handler behaviour, see childHandlers
	envChildRemote  = "TENURE_CHILD_REMOTE"      // base URL of the dedup server
	envChildConc    = "TENURE_CHILD_CONCURRENCY" // handler slots
	envChildID      = "TENURE_CHILD_ID"          // worker id (locked_by)
	envChildFlags   = "TENURE_CHILD_FLAGS"       // comma-separated flags
	envChildStats   = "TENURE_CHILD_STATS_MS"    // print "stats" every N ms (0: only on request)
	envChildSleep   = "TENURE_CHILD_SLEEP_MS"    // soak handler: max random sleep before and after the effect
)

// chaosArgs is the kind the chaos tests run in children and in the test process.
type chaosArgs struct {
	Tag string `json:"tag"`
}

func (chaosArgs) Kind() string        { return "chaos" }
func (chaosArgs) PayloadVersion() int { return 1 }

// effArgs is the kind whose handler performs one external effect.
type effArgs struct {
	Tag string `json:"tag"`
}

func (effArgs) Kind() string        { return "effect" }
func (effArgs) PayloadVersion() int { return 1 }

// chaosBatchArgs is the batch kind the batch crash tests run in children and in the test
// process.
type chaosBatchArgs struct {
	Tag string `json:"tag"`
}

func (chaosBatchArgs) Kind() string        { return "chaosbatch" }
func (chaosBatchArgs) PayloadVersion() int { return 1 }

// fastRetry makes retries (and reclaims, which use the reclaiming worker's policy for the kind)
// come back within milliseconds.
var fastRetry = worker.FullJitter{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond}

// ---------------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------------

// childOut serializes the child's report lines on stdout.
type childOut struct{ mu sync.Mutex }

func (o *childOut) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func (o *childOut) stats(verb string, s worker.Stats) {
	o.printf("%s claimed=%d succeeded=%d retried=%d dead=%d stale=%d leases_lost=%d reclaimed=%d heartbeats=%d heartbeat_rows=%d finish_retries=%d stuck=%d late=%d",
		verb, s.Claimed, s.Succeeded, s.Retried, s.Dead, s.StaleRejected, s.LeasesLost, s.Reclaimed,
		s.Heartbeats, s.HeartbeatRows, s.FinishRetries, s.Stuck, s.LateFinishes)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// childMain runs a child process and returns its exit code.
// childTerm receives SIGTERM from the very start of a child, so a graceful stop asked
// right after spawning is not lost to the default action (which kills the process).
var childTerm = make(chan os.Signal, 1)

func childMain(mode string) int {
	signal.Notify(childTerm, syscall.SIGTERM)
	out := &childOut{}
	var err error
	switch mode {
	case "worker":
		err = childWorker(out)
	case "claim-uncommitted":
		err = childClaimUncommitted(out)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	return 0
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// stdinCommands delivers the parent's commands; the channel closes when the parent is gone.
func stdinCommands() <-chan string {
	ch := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- strings.TrimSpace(sc.Text())
		}
		close(ch)
	}()
	return ch
}

// childClaimUncommitted runs the claim statement inside a transaction that it never commits,
// reports the claimed row and its backend pid, and waits to be killed.
func childClaimUncommitted(out *childOut) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv(envChildDB))
	if err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return err
	}
	rows, err := gen.New(tx).ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: "doomed-claimer", Queue: "default", Batch: 1, Kinds: []string{"chaos", "effect", "noop"}, KindVersions: []int32{1, 1, 1}, KindLeaseMs: []int32{0, 0, 0}})
	if err != nil {
		return err
	}
	if len(rows) != 1 || rows[0].ID == nil {
		return fmt.Errorf("claimed %d rows, want 1", len(rows))
	}
	out.printf("claimed-uncommitted %d %d %d", *rows[0].ID, *rows[0].Generation, pid)
	for range stdinCommands() {
	}
	os.Exit(3) // parent gone; never commit
	return nil
}

func childWorker(out *childOut) error {
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(os.Getenv(envChildDB))
	if err != nil {
		return err
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	mode := os.Getenv(envChildHandler)
	flags := map[string]bool{}
	for _, f := range strings.Split(os.Getenv(envChildFlags), ",") {
		flags[f] = true
	}
	remote := os.Getenv(envChildRemote)
	sleepMax := envInt(envChildSleep, 0)

	cfg := &worker.Config{
		ID:           os.Getenv(envChildID),
		Queues:       map[string]worker.QueueConfig{"default": {Concurrency: envInt(envChildConc, 1)}},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		FetchPollMin: 10 * time.Millisecond,
		FetchPollMax: 100 * time.Millisecond,
		ReclaimEvery: 100 * time.Millisecond,
		EngineConns:  4,
		OnOutcome: func(o worker.Outcome) {
			out.printf("outcome %d %d %s code=%s stale=%t err=%q", o.Job.ID, o.Job.Generation, o.Transition, o.Code,
				errors.Is(o.Err, worker.ErrLostOwnership), errText(o.Err))
		},
	}
	if flags["limit2"] { // flow control: at most 2 chaos jobs running cluster-wide
		cfg.Queues["default"] = worker.QueueConfig{Concurrency: envInt(envChildConc, 1), Limits: []worker.Limit{{Kind: "chaos", MaxRunning: 2}}}
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return err
	}
	goCh := make(chan struct{})
	never := make(chan struct{})

	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
		out.printf("claimed %d %d %d %s", job.ID, job.Generation, job.Attempt, job.ClaimToken)
		switch mode {
		case "block": // crash tests: hold the job until killed
			<-never
			return nil
		case "complete-on-go":
			<-goCh
			out.printf("resumed %d %d ctx_err=%q", job.ID, job.Generation, errText(context.Cause(ctx)))
			return nil
		case "fail-on-go":
			<-goCh
			out.printf("resumed %d %d ctx_err=%q", job.ID, job.Generation, errText(context.Cause(ctx)))
			return errors.New("handler failed after resume")
		case "wait-ctx":
			<-ctx.Done()
			cause := context.Cause(ctx)
			out.printf("ctx-done %d %d lease_lost=%t cause=%q", job.ID, job.Generation, cause == worker.ErrLeaseLost, errText(cause))
			return cause
		}
		return fmt.Errorf("child: unknown handler mode %q", mode)
	}, &worker.HandlerOptions{Retry: fastRetry})

	// The batch kind (batch_test.go's crash tests): every job of a call is reported as
	// claimed, then the call blocks until killed, or until "go" and succeeds for every job.
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[chaosBatchArgs]) ([]error, error) {
		for _, job := range batch {
			out.printf("claimed %d %d %d %s", job.ID, job.Generation, job.Attempt, job.ClaimToken)
		}
		out.printf("batch %d", len(batch))
		switch mode {
		case "block":
			<-never
		case "complete-on-go":
			<-goCh
			for _, job := range batch {
				out.printf("resumed %d %d ctx_err=%q", job.ID, job.Generation, errText(context.Cause(worker.JobContext(ctx, job.JobRow))))
			}
		default:
			return nil, fmt.Errorf("child: unknown batch handler mode %q", mode)
		}
		return nil, nil
	}, &worker.BatchOptions{HandlerOptions: worker.HandlerOptions{Retry: fastRetry}, MaxSize: 5, MaxWait: 200 * time.Millisecond})

	remoteFn := func(ctx context.Context, call worker.EffectCall) (string, error) {
		r, err := testkit.CallRemote(ctx, remote, call.Key, call.Generation)
		if err != nil {
			return "", err
		}
		out.printf("remote-done %d %d %s %s", call.JobID, call.Generation, r, call.Key)
		return r, nil
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		if mode != "soak" {
			out.printf("claimed %d %d %d %s", job.ID, job.Generation, job.Attempt, job.ClaimToken)
		}
		fn := remoteFn
		switch mode {
		case "effect-remote-block": // the remote applied the effect; crash before the ledger write
			fn = func(ctx context.Context, call worker.EffectCall) (string, error) {
				if _, err := remoteFn(ctx, call); err != nil {
					return "", err
				}
				<-never
				return "", nil
			}
		case "effect-stale": // the remote applied the effect; wait for "go" before the ledger write
			fn = func(ctx context.Context, call worker.EffectCall) (string, error) {
				r, err := remoteFn(ctx, call)
				if err != nil {
					return "", err
				}
				<-goCh
				return r, nil
			}
		case "soak":
			if sleepMax > 0 {
				time.Sleep(time.Duration(rand.IntN(sleepMax+1)) * time.Millisecond)
			}
		}
		res, err := worker.Effect(ctx, job.JobRow, "charge", fn)
		if err != nil {
			if mode != "soak" {
				out.printf("effect-err %d %d stale=%t err=%q", job.ID, job.Generation, errors.Is(err, worker.ErrLostOwnership), err.Error())
			}
			if flags["ignore-effect-err"] {
				return nil
			}
			return err
		}
		if mode != "soak" {
			out.printf("effect-done %d %d replayed=%t value=%s gen=%d", job.ID, job.Generation, res.Replayed, res.Value, res.Generation)
		}
		switch mode {
		case "effect-block": // the effect is recorded; crash before the completion
			<-never
		case "soak":
			if sleepMax > 0 {
				time.Sleep(time.Duration(rand.IntN(sleepMax+1)) * time.Millisecond)
			}
		}
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})

	if err := w.Start(ctx); err != nil {
		return err
	}
	out.printf("ready %d", os.Getpid())

	cmds := stdinCommands()
	term := childTerm
	var tick <-chan time.Time
	if ms := envInt(envChildStats, 0); ms > 0 {
		tk := time.NewTicker(time.Duration(ms) * time.Millisecond)
		defer tk.Stop()
		tick = tk.C
	}
	var goOnce sync.Once
	for {
		select {
		case c, ok := <-cmds:
			if !ok {
				os.Exit(3) // the parent is gone
			}
			switch c {
			case "go":
				goOnce.Do(func() { close(goCh) })
			case "stats":
				out.stats("stats", w.Stats())
			}
		case <-tick:
			out.stats("stats", w.Stats())
		case <-term:
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := w.Stop(sctx)
			cancel()
			out.stats("final-stats", w.Stats())
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: stop:", err)
			}
			return nil
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------------

type childOpts struct {
	Mode        string // "worker" (default) or "claim-uncommitted"
	DB          string
	Handler     string
	Remote      string
	Concurrency int
	ID          string
	Flags       string
	StatsEvery  time.Duration
	SleepMS     int
}

// childProc is a running child process and everything it printed.
type childProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	lines   []string
	partial []byte
	stderr  tailBuffer

	exited  chan struct{}
	waitErr error
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 64<<10; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Write collects the child's stdout as lines.
func (c *childProc) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.lines = append(c.lines, string(c.partial[:i]))
		c.partial = c.partial[i+1:]
	}
	return len(p), nil
}

func startChild(t testing.TB, o childOpts) *childProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode == "" {
		o.Mode = "worker"
	}
	if o.ID == "" {
		o.ID = fmt.Sprintf("child-%s-%d", o.Handler, rand.IntN(1e6))
	}
	c := &childProc{name: o.ID, exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(),
		envChild+"="+o.Mode,
		envChildDB+"="+o.DB,
		envChildHandler+"="+o.Handler,
		envChildRemote+"="+o.Remote,
		envChildConc+"="+strconv.Itoa(max(o.Concurrency, 1)),
		envChildID+"="+o.ID,
		envChildFlags+"="+o.Flags,
		envChildStats+"="+strconv.Itoa(int(o.StatsEvery/time.Millisecond)),
		envChildSleep+"="+strconv.Itoa(o.SleepMS),
	)
	c.cmd.Stdout = c
	c.cmd.Stderr = &c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", o.ID, err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill()
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("child %s (pid %d) did not exit after SIGKILL", c.name, c.cmd.Process.Pid)
		}
		if t.Failed() {
			c.dump(t)
		}
	})
	return c
}

func (c *childProc) dump(t testing.TB) {
	c.mu.Lock()
	lines := c.lines
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	out := strings.Join(lines, "\n")
	c.mu.Unlock()
	t.Logf("child %s stdout (tail):\n%s\nchild %s stderr (tail):\n%s", c.name, out, c.name, c.stderr.String())
}

func (c *childProc) signal(sig syscall.Signal) {
	_ = c.cmd.Process.Signal(sig)
}

func (c *childProc) kill() { c.signal(syscall.SIGKILL) }

// killAndWait SIGKILLs the child and waits for it to be reaped.
func (c *childProc) killAndWait(t testing.TB) {
	t.Helper()
	c.kill()
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("child %s did not exit after SIGKILL", c.name)
	}
}

func (c *childProc) pause()  { c.signal(syscall.SIGSTOP) }
func (c *childProc) resume() { c.signal(syscall.SIGCONT) }

func (c *childProc) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

func (c *childProc) send(t testing.TB, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		t.Fatalf("child %s: sending %q: %v", c.name, cmd, err)
	}
}

// find returns the fields of the first line whose first field is verb and that match accepts.
func (c *childProc) find(verb string, match func(f []string) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == verb && (match == nil || match(f)) {
			return f
		}
	}
	return nil
}

// last returns the fields of the last line whose first field is verb.
func (c *childProc) last(verb string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.lines) - 1; i >= 0; i-- {
		f := strings.Fields(c.lines[i])
		if len(f) > 0 && f[0] == verb {
			return f
		}
	}
	return nil
}

// waitLine waits for a line as find describes it. It fails the test when the child exits or
// the timeout passes first.
func (c *childProc) waitLine(t testing.TB, timeout time.Duration, verb string, match func(f []string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if f := c.find(verb, match); f != nil {
			return f
		}
		select {
		case <-c.exited:
			if f := c.find(verb, match); f != nil {
				return f
			}
			t.Fatalf("child %s exited (%v) before printing %q", c.name, c.waitErr, verb)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %s: timed out after %v waiting for %q", c.name, timeout, verb)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// forJob matches report lines about job id (second field), optionally of one generation.
func forJob(id int64, generation ...int64) func(f []string) bool {
	return func(f []string) bool {
		if len(f) < 2 || f[1] != strconv.FormatInt(id, 10) {
			return false
		}
		if len(generation) > 0 && (len(f) < 3 || f[2] != strconv.FormatInt(generation[0], 10)) {
			return false
		}
		return true
	}
}

// kv returns the value of key=value among fields ("" when absent).
func kv(f []string, key string) string {
	for _, s := range f {
		if k, v, ok := strings.Cut(s, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func kvInt(f []string, key string) int64 {
	n, _ := strconv.ParseInt(kv(f, key), 10, 64)
	return n
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
