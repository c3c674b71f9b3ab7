package faults_test

// Child worker processes: the test binary re-executed with TENURE_FAULTS_CHILD set (see
// TestMain). A child runs a worker on the "default" queue and reports on stdout, one line per
// event: "ready <pid>", "claimed <id> <generation> <attempt> <token>", "outcome <id>
// <generation> <transition> code=.. stale=.. err=..", "stats k=v..." (on "stats" from stdin
// and every StatsEvery). It exits when stdin closes (the parent died) and stops gracefully on
// SIGTERM ("final-stats"). The parent timestamps every line when it arrives.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/worker"
)

const (
	envChild        = "TENURE_FAULTS_CHILD"        // "worker"
	envChildDB      = "TENURE_FAULTS_DB"           // database URL
	envChildHandler = "TENURE_FAULTS_HANDLER"      // "record", "effect" or "periodic"
	envChildRemote  = "TENURE_FAULTS_REMOTE"       // dedup server base URL
	envChildConc    = "TENURE_FAULTS_CONCURRENCY"  // handler slots
	envChildID      = "TENURE_FAULTS_ID"           // worker id
	envChildStats   = "TENURE_FAULTS_STATS_MS"     // print stats every N ms (0: on request)
	envChildSleep   = "TENURE_FAULTS_SLEEP_MS"     // handler sleeps uniformly in [0, N] ms
	envChildAsync   = "TENURE_FAULTS_ASYNC_COMMIT" // "1": Config.AsynchronousCommit
	envChildAhead   = "TENURE_FAULTS_CLAIM_AHEAD"  // QueueConfig.ClaimAhead
)

var childTerm = make(chan os.Signal, 1)

type childOut struct{ mu sync.Mutex }

func (o *childOut) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func (o *childOut) stats(verb string, s worker.Stats) {
	o.printf("%s claimed=%d succeeded=%d retried=%d dead=%d stale=%d leases_lost=%d reclaimed=%d finish_retries=%d abandoned=%d claim_errors=%d listener_reconnects=%d claimed_ahead=%d",
		verb, s.Claimed, s.Succeeded, s.Retried, s.Dead, s.StaleRejected, s.LeasesLost, s.Reclaimed,
		s.FinishRetries, s.FinishAbandoned, s.ClaimErrors, s.ListenerReconnects, s.ClaimedAhead)
}

func childMain(mode string) int {
	signal.Notify(childTerm, syscall.SIGTERM)
	var err error
	switch mode {
	case "worker":
		err = childWorker(&childOut{})
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
	remote := os.Getenv(envChildRemote)
	sleepMax := envInt(envChildSleep, 0)
	nap := func() {
		if sleepMax > 0 {
			time.Sleep(time.Duration(rand.IntN(sleepMax+1)) * time.Millisecond)
		}
	}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: envInt(envChildConc, 1), ClaimAhead: envInt(envChildAhead, 0)}})
	cfg.ID = os.Getenv(envChildID)
	cfg.AsynchronousCommit = os.Getenv(envChildAsync) == "1"
	cfg.OnOutcome = func(o worker.Outcome) {
		out.printf("outcome %d %d %s code=%s stale=%t err=%q", o.Job.ID, o.Job.Generation, o.Transition, o.Code,
			errors.Is(o.Err, worker.ErrLostOwnership), errText(o.Err))
	}
	if mode == "periodic" {
		// A 1-second schedule shared by every child; the args function reports the tick, then
		// dawdles inside the enqueueing transaction (the schedule's row locked, its next tick
		// written, the job not yet inserted) so that a SIGKILL can land there.
		cfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("every-second", worker.Every(time.Second),
			func(_ context.Context, t worker.Tick) (tickArgs, error) {
				out.printf("enqueuing %d missed=%d", t.At.UnixMicro(), t.Missed)
				time.Sleep(100 * time.Millisecond)
				return tickArgs{AtUs: t.At.UnixMicro(), Missed: t.Missed}, nil
			}, nil)}
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		return err
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[tickArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		out.printf("claimed %d %d %d %s", job.ID, job.Generation, job.Attempt, job.ClaimToken)
		nap()
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[effArgs]) error {
		out.printf("claimed %d %d %d %s", job.ID, job.Generation, job.Attempt, job.ClaimToken)
		nap()
		_, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return testkit.CallRemote(ctx, remote, call.Key, call.Generation)
		})
		if err != nil {
			return err
		}
		nap()
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	if mode != "record" && mode != "effect" && mode != "periodic" {
		return fmt.Errorf("unknown handler mode %q", mode)
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	out.printf("ready %d", os.Getpid())

	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- strings.TrimSpace(sc.Text())
		}
		close(cmds)
	}()
	var tick <-chan time.Time
	if ms := envInt(envChildStats, 0); ms > 0 {
		tk := time.NewTicker(time.Duration(ms) * time.Millisecond)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case c, ok := <-cmds:
			if !ok {
				os.Exit(3)
			}
			if c == "stats" {
				out.stats("stats", w.Stats())
			}
		case <-tick:
			out.stats("stats", w.Stats())
		case <-childTerm:
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

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ---------------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------------

type childOpts struct {
	DB          string
	Handler     string
	Remote      string
	Concurrency int
	ID          string
	StatsEvery  time.Duration
	SleepMS     int
	AsyncCommit bool
	ClaimAhead  int
	NetNS       string // run the child inside this network namespace (ip netns exec)
}

// line is one stdout line of a child and when the parent read it.
type line struct {
	At     time.Time
	Fields []string
}

type childProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	lines   []line
	partial []byte
	stderr  bytes.Buffer
	errMu   sync.Mutex

	exited  chan struct{}
	waitErr error
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 256<<10 {
		return len(p), nil
	}
	return w.b.Write(p)
}

func (c *childProc) Write(p []byte) (int, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.lines = append(c.lines, line{now, strings.Fields(string(c.partial[:i]))})
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
	if o.ID == "" {
		o.ID = fmt.Sprintf("child-%d", rand.IntN(1e6))
	}
	async := "0"
	if o.AsyncCommit {
		async = "1"
	}
	c := &childProc{name: o.ID, exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	if o.NetNS != "" {
		c.cmd = exec.Command("ip", "netns", "exec", o.NetNS, exe) // ip execs exe: same pid
	}
	c.cmd.Env = append(os.Environ(),
		envChild+"=worker",
		envChildDB+"="+o.DB,
		envChildHandler+"="+o.Handler,
		envChildRemote+"="+o.Remote,
		envChildConc+"="+strconv.Itoa(max(o.Concurrency, 1)),
		envChildID+"="+o.ID,
		envChildStats+"="+strconv.Itoa(int(o.StatsEvery/time.Millisecond)),
		envChildSleep+"="+strconv.Itoa(o.SleepMS),
		envChildAsync+"="+async,
		envChildAhead+"="+strconv.Itoa(o.ClaimAhead),
	)
	c.cmd.Stdout = c
	c.cmd.Stderr = lockedWriter{&c.errMu, &c.stderr}
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
		c.signal(syscall.SIGCONT)
		c.signal(syscall.SIGKILL)
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("child %s did not exit after SIGKILL", c.name)
		}
		if t.Failed() {
			c.dump(t)
		}
	})
	return c
}

func (c *childProc) dump(t testing.TB) {
	c.mu.Lock()
	ls := c.lines
	if len(ls) > 30 {
		ls = ls[len(ls)-30:]
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(strings.Join(l.Fields, " ") + "\n")
	}
	c.mu.Unlock()
	c.errMu.Lock()
	se := c.stderr.String()
	c.errMu.Unlock()
	if len(se) > 4000 {
		se = se[len(se)-4000:]
	}
	t.Logf("child %s stdout (tail):\n%s\nchild %s stderr (tail):\n%s", c.name, b.String(), c.name, se)
}

func (c *childProc) signal(sig syscall.Signal) { _ = c.cmd.Process.Signal(sig) }

func (c *childProc) killAndWait(t testing.TB) {
	t.Helper()
	c.signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("child %s did not exit after SIGKILL", c.name)
	}
}

func (c *childProc) send(t testing.TB, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		t.Fatalf("child %s: sending %q: %v", c.name, cmd, err)
	}
}

// all returns the lines whose first field is verb.
func (c *childProc) all(verb string) []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []line
	for _, l := range c.lines {
		if len(l.Fields) > 0 && l.Fields[0] == verb {
			out = append(out, l)
		}
	}
	return out
}

func (c *childProc) count(verb string) int { return len(c.all(verb)) }

// waitLine waits for a line with first field verb (received after `after`) that match
// accepts.
func (c *childProc) waitLine(t testing.TB, timeout time.Duration, verb string, after time.Time, match func(f []string) bool) line {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, l := range c.all(verb) {
			if !l.At.Before(after) && (match == nil || match(l.Fields)) {
				return l
			}
		}
		select {
		case <-c.exited:
			t.Fatalf("child %s exited (%v) before printing %q", c.name, c.waitErr, verb)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %s: timed out after %v waiting for %q", c.name, timeout, verb)
		}
		time.Sleep(5 * time.Millisecond)
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

// attemptKey is one (job, generation) a handler saw.
type attemptKey struct {
	ID, Gen int64
}

// generationConflicts collects every "claimed <id> <gen> <attempt> <token>" line of the
// children and returns the (job, generation) pairs seen with more than one claim token.
func generationConflicts(children ...*childProc) (seen int, conflicts []string) {
	tokens := map[attemptKey]map[string]bool{}
	for _, c := range children {
		for _, l := range c.all("claimed") {
			if len(l.Fields) < 5 {
				continue
			}
			id, _ := strconv.ParseInt(l.Fields[1], 10, 64)
			g, _ := strconv.ParseInt(l.Fields[2], 10, 64)
			k := attemptKey{id, g}
			if tokens[k] == nil {
				tokens[k] = map[string]bool{}
			}
			tokens[k][l.Fields[4]] = true
		}
	}
	for k, ts := range tokens {
		if len(ts) > 1 {
			conflicts = append(conflicts, fmt.Sprintf("job %d gen %d: %d tokens", k.ID, k.Gen, len(ts)))
		}
	}
	return len(tokens), conflicts
}
