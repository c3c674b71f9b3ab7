package tenurenats_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

// mailArgs is version 2 of the "mail" kind; version 1 called the field "email".
type mailArgs struct {
	To   string `json:"to"`
	Note string `json:"note,omitempty"`
}

func (mailArgs) Kind() string        { return "mail" }
func (mailArgs) PayloadVersion() int { return 2 }
func (a mailArgs) Validate() error {
	if a.To == "" {
		return &generics.FieldError{Field: "to", Rule: "required", Msg: "is required"}
	}
	return nil
}

type mailV1 struct {
	Email string `json:"email"`
}

var upgradeMailV1 = generics.Upgrade(1, func(old mailV1) (mailArgs, error) { return mailArgs{To: old.Email}, nil })

type dotted struct{}

func (dotted) Kind() string        { return "a.b" }
func (dotted) PayloadVersion() int { return 1 }

// env is one test's JetStream setup: a unique stream capturing "<prefix>.>", a client
// publishing jobs to "<prefix>.jobs.<kind>" and worker configs dead-lettering to
// "<prefix>.dead.<kind>".
type env struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	prefix string
}

func newEnv(t *testing.T) env {
	_, js := connect(t)
	s, prefix := testStream(t, js, time.Minute)
	return env{js: js, stream: s, name: s.CachedInfo().Config.Name, prefix: prefix}
}

func (e env) client(t testing.TB, reg *generics.Registry) *tenurenats.Client {
	c, err := tenurenats.NewClient(e.js, &tenurenats.ClientConfig{SubjectPrefix: e.prefix + ".jobs", Stream: e.name, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e env) config(onOutcome func(tenurenats.Outcome)) *tenurenats.Config {
	return &tenurenats.Config{Stream: e.name, SubjectPrefix: e.prefix + ".jobs", DeadLetterPrefix: e.prefix + ".dead",
		FetchWait: 200 * time.Millisecond, StopTimeout: 2 * time.Second, OnOutcome: onOutcome}
}

// run runs w until the test ends.
func run(t testing.TB, w *tenurenats.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// outcomes collects a worker's outcomes.
type outcomes struct {
	mu  sync.Mutex
	all []tenurenats.Outcome
}

func (o *outcomes) add(x tenurenats.Outcome) { o.mu.Lock(); o.all = append(o.all, x); o.mu.Unlock() }
func (o *outcomes) list() []tenurenats.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]tenurenats.Outcome(nil), o.all...)
}
func (o *outcomes) final(n int) func() bool {
	return func() bool {
		c := 0
		for _, x := range o.list() {
			if x.Transition == "succeeded" || x.Transition == "dead" {
				c++
			}
		}
		return c >= n
	}
}

func TestInsertValidates(t *testing.T) {
	e := newEnv(t)
	reg := generics.NewRegistry()
	generics.MustRegister[mailArgs](reg, generics.WithDefaults(generics.KindDefaults{MaxAttempts: 7}))
	c := e.client(t, reg)
	ctx := context.Background()
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"invalid args", func() error { _, err := tenurenats.Insert(ctx, c, mailArgs{}, nil); return err }(), generics.ErrInvalidPayload},
		{"unknown kind", func() error { _, err := tenurenats.Insert(ctx, c, mailV1Args{}, nil); return err }(), generics.ErrUnknownKind},
		{"kind not a token", func() error { _, err := tenurenats.Insert(ctx, e.client(t, nil), dotted{}, nil); return err }(), tenurenats.ErrKindNotSubjectToken},
		{"delay", func() error {
			_, err := tenurenats.Insert(ctx, c, mailArgs{To: "a@b"}, &jobs.InsertOpts{Delay: time.Second})
			return err
		}(), jobs.ErrInvalidOptions},
		{"max attempts", func() error {
			_, err := tenurenats.Insert(ctx, c, mailArgs{To: "a@b"}, &jobs.InsertOpts{MaxAttempts: 1001})
			return err
		}(), jobs.ErrInvalidOptions},
		{"metadata NUL", func() error {
			_, err := tenurenats.Insert(ctx, c, mailArgs{To: "a@b"}, &jobs.InsertOpts{Metadata: map[string]string{"k": "\x00"}})
			return err
		}(), jobs.ErrInvalidOptions},
		{"NUL in args", func() error { _, err := tenurenats.Insert(ctx, c, mailArgs{To: "a\x00b"}, nil); return err }(), generics.ErrNULCharacter},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if info, err := e.stream.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("refused inserts published %d messages (%v)", info.State.Msgs, err)
	}
	res, err := tenurenats.Insert(ctx, c, mailArgs{To: "a@b"}, &jobs.InsertOpts{Metadata: map[string]string{"request_id": "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.stream.GetMsg(ctx, res.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(tenurenats.HeaderMaxAttempts); got != "7" {
		t.Errorf("max attempts header %q, want the registry's 7", got)
	}
	if m.Subject != e.prefix+".jobs.mail" || m.Header.Get(tenurenats.HeaderVersion) != "2" || string(m.Data) != `{"to":"a@b"}` {
		t.Errorf("stored %s %v %s", m.Subject, m.Header, m.Data)
	}
}

// mailV1Args is an unregistered kind for TestInsertValidates.
type mailV1Args struct{}

func (mailV1Args) Kind() string        { return "mail_v1_unregistered" }
func (mailV1Args) PayloadVersion() int { return 1 }

// TestJobRetriesWithAttemptNumbers: a handler failing twice (the second time with RetryAfter)
// runs three times with attempts 1, 2, 3, the retry delays honoured, and succeeds.
func TestJobRetriesWithAttemptNumbers(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		attempt int
		gen     int64
		id      int64
		at      time.Time
		meta    string
	}
	var mu sync.Mutex
	var runs []seen
	err = tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		mu.Lock()
		runs = append(runs, seen{job.Attempt, job.Generation, job.ID, time.Now(), job.Metadata["request_id"]})
		mu.Unlock()
		switch job.Attempt {
		case 1:
			return errors.New("smtp down")
		case 2:
			return worker.RetryAfter(errors.New("slow down"), 400*time.Millisecond)
		}
		return nil
	}, &worker.HandlerOptions{Lease: 2 * time.Second, Retry: worker.FullJitter{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	res, err := tenurenats.Insert(context.Background(), e.client(t, w.Registry()), mailArgs{To: "x@y"},
		&jobs.InsertOpts{Metadata: map[string]string{"request_id": "r-42"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the job to succeed", oc.final(1))
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3: %+v", len(runs), runs)
	}
	for i, r := range runs {
		if r.attempt != i+1 || r.gen != int64(i+1) || r.id != int64(res.Sequence) || r.meta != "r-42" {
			t.Errorf("run %d: attempt %d generation %d id %d metadata %q; want attempt=generation=%d, id %d, r-42", i, r.attempt, r.gen, r.id, r.meta, i+1, res.Sequence)
		}
	}
	if gap := runs[2].at.Sub(runs[1].at); gap < 400*time.Millisecond {
		t.Errorf("RetryAfter(400ms) honoured after %v", gap)
	}
	o := oc.list()
	t.Logf("outcomes: %+v", o)
	if len(o) != 3 || o[0].Code != worker.CodeHandlerError || o[0].Delay > 20*time.Millisecond || o[1].Code != worker.CodeRateLimit ||
		o[1].Delay != 400*time.Millisecond || o[2].Transition != "succeeded" {
		t.Errorf("outcomes %+v: want retry HANDLER_ERROR (delay <= 20ms, full jitter of 10ms*2^1), retry RATE_LIMIT 400ms, succeeded", o)
	}
}

// TestJobDeadLetters: a failing job is dead-lettered after its max attempts, a permanent error
// and an undecodable payload at once; each dead letter carries the payload and the error, and
// the jobs are not delivered again.
func TestJobDeadLetters(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	attempts := map[string][]int{}
	lease := 500 * time.Millisecond
	err = tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		mu.Lock()
		attempts[job.Args.To] = append(attempts[job.Args.To], job.Attempt)
		mu.Unlock()
		if job.Args.To == "permanent@x" {
			return worker.Permanent(errors.New("mailbox does not exist"))
		}
		return fmt.Errorf("attempt %d failed\nsecond line", job.Attempt)
	}, &worker.HandlerOptions{Lease: lease, MaxAttempts: 3, Retry: worker.FullJitter{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond},
		Upgraders: []generics.Upgrader{upgradeMailV1}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	ctx := context.Background()
	c := e.client(t, w.Registry())
	poison, err := tenurenats.Insert(ctx, c, mailArgs{To: "poison@x"}, nil) // MaxAttempts 3 from the registry
	if err != nil {
		t.Fatal(err)
	}
	perm, err := tenurenats.Insert(ctx, c, mailArgs{To: "permanent@x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := nats.NewMsg(e.prefix + ".jobs.mail") // a version-2 payload with an unknown field
	bad.Header.Set(tenurenats.HeaderKind, "mail")
	bad.Header.Set(tenurenats.HeaderVersion, "2")
	bad.Data = []byte(`{"to":"a@b","cc":"c@d"}`)
	badAck, err := e.js.PublishMsg(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "three dead jobs", oc.final(3))
	time.Sleep(2 * lease) // nothing may come back
	mu.Lock()
	if fmt.Sprint(attempts["poison@x"]) != "[1 2 3]" || fmt.Sprint(attempts["permanent@x"]) != "[1]" || len(attempts) != 2 {
		t.Errorf("attempts %v: want poison [1 2 3], permanent [1], the invalid payload never handed to the handler", attempts)
	}
	mu.Unlock()
	want := map[uint64]struct {
		code     worker.ErrorCode
		attempts string
		data     string
	}{
		poison.Sequence: {worker.CodeHandlerError, "3", `{"to":"poison@x"}`},
		perm.Sequence:   {worker.CodePermanent, "1", `{"to":"permanent@x"}`},
		badAck.Sequence: {worker.CodeInvalidPayload, "1", `{"to":"a@b","cc":"c@d"}`},
	}
	dead := 0
	for _, m := range streamMessages(t, e.stream) {
		if m.Subject != e.prefix+".dead.mail" {
			continue
		}
		dead++
		src, _ := strconv.ParseUint(m.Header.Get(tenurenats.HeaderSourceSeq), 10, 64)
		wt, ok := want[src]
		if !ok {
			t.Errorf("dead letter for unexpected seq %d", src)
			continue
		}
		t.Logf("dead letter of seq %d: code %s attempts %s error %q", src, m.Header.Get(tenurenats.HeaderErrorCode),
			m.Header.Get(tenurenats.HeaderAttempts), m.Header.Get(tenurenats.HeaderError))
		if m.Header.Get(tenurenats.HeaderErrorCode) != string(wt.code) || m.Header.Get(tenurenats.HeaderAttempts) != wt.attempts ||
			string(m.Data) != wt.data || m.Header.Get(tenurenats.HeaderError) == "" || m.Header.Get(tenurenats.HeaderSource) != e.name {
			t.Errorf("dead letter of seq %d: %v %s; want code %s attempts %s data %s", src, m.Header, m.Data, wt.code, wt.attempts, wt.data)
		}
	}
	if dead != 3 {
		t.Errorf("%d dead letters, want 3", dead)
	}
	ci, err := e.js.Consumer(ctx, e.name, "tenure_mail")
	if err != nil {
		t.Fatal(err)
	}
	info, err := ci.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("consumer still has ack-pending %d, pending %d, redelivered %d", info.NumAckPending, info.NumPending, info.NumRedelivered)
	}
	if st := w.Stats(); st.Dead != 3 || st.Retried != 2 || st.Succeeded != 0 {
		t.Errorf("stats %+v: want 3 dead, 2 retried", st)
	}
}

// TestJobPayloadUpgrade: a version-1 payload is upgraded before the handler sees it.
func TestJobPayloadUpgrade(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan mailArgs, 1)
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		got <- job.Args
		return nil
	}, &worker.HandlerOptions{Upgraders: []generics.Upgrader{upgradeMailV1}}); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	m := nats.NewMsg(e.prefix + ".jobs.mail")
	m.Header.Set(tenurenats.HeaderKind, "mail")
	m.Header.Set(tenurenats.HeaderVersion, "1")
	m.Data = []byte(`{"email":"old@x"}`)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.To != "old@x" {
			t.Fatalf("upgraded args %+v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the version-1 job never reached the handler")
	}
}

// TestLongJobKeptInProgress: a handler running 2.5 times the AckWait is not redelivered:
// the worker keeps the message in progress while it runs.
func TestLongJobKeptInProgress(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	lease := time.Second // in progress every 333 ms: a margin for a loaded machine
	var mu sync.Mutex
	var starts []int
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		mu.Lock()
		starts = append(starts, job.Attempt)
		mu.Unlock()
		select {
		case <-time.After(5 * lease / 2):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, &worker.HandlerOptions{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	if _, err := tenurenats.Insert(context.Background(), e.client(t, nil), mailArgs{To: "slow@x"}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the job to finish", oc.final(1))
	time.Sleep(3 * lease / 2)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(starts) != "[1]" || oc.list()[0].Transition != "succeeded" {
		t.Fatalf("starts %v, outcomes %+v: want one attempt that succeeded", starts, oc.list())
	}
}

// TestWorkerKilledMidJob: a worker process applies a job's effect and is SIGKILLed before it
// acknowledges; after AckWait the message is delivered to another worker (attempt 2), whose
// Effect finds the result in the ledger: the remote applied the effect once.
func TestWorkerKilledMidJob(t *testing.T) {
	e := newEnv(t)
	pool, url := newPoolURL(t)
	remote := testkit.NewRemote(t)
	lease := time.Second
	child := testkit.StartChild(t, "worker", envChildDB+"="+url, envChildStream+"="+e.name, envChildPrefix+"="+e.prefix,
		envChildLease+"="+fmt.Sprint(lease.Milliseconds()), envChildRemote+"="+remote.URL)
	child.WaitLine(t, "ready", 20*time.Second)
	res, err := tenurenats.Insert(context.Background(), e.client(t, nil), mailArgs{To: "kill@x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := child.WaitLine(t, "effect-done", 10*time.Second)
	child.Kill(t)
	killed := time.Now()
	t.Logf("child: %q; SIGKILLed", line)

	var oc outcomes
	cfg := e.config(oc.add)
	cfg.Pool = pool
	w, err := tenurenats.NewWorker(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		attempt  int
		replayed bool
		value    string
		at       time.Time
	}
	ch := make(chan seen, 4)
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		r, err := worker.Effect(ctx, job.JobRow, "send", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return testkit.CallRemote(ctx, remote.URL, call.Key, call.Generation)
		})
		if err != nil {
			return err
		}
		ch <- seen{job.Attempt, r.Replayed, r.Value, time.Now()}
		return nil
	}, &worker.HandlerOptions{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	var s seen
	select {
	case s = <-ch:
	case <-time.After(15 * time.Second):
		t.Fatal("the job was not redelivered after the worker was killed")
	}
	waitFor(t, 5*time.Second, "the outcome", oc.final(1))
	t.Logf("redelivered %v after the kill: attempt %d replayed %t value %s", s.at.Sub(killed).Round(time.Millisecond), s.attempt, s.replayed, s.value)
	key := fmt.Sprintf("nats:%s:job:%d:effect:send", e.name, res.Sequence)
	calls, applied, receipt := remote.Key(key)
	if s.attempt != 2 || !s.replayed || s.value != receipt || calls != 1 || applied != 1 {
		t.Fatalf("attempt %d replayed %t value %q; remote key %s: %d calls, %d applied, receipt %q; want attempt 2 replaying the one call's receipt",
			s.attempt, s.replayed, s.value, key, calls, applied, receipt)
	}
	var rows int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.stream_effects WHERE key = $1 AND seq = $2 AND generation = 1",
		key, res.Sequence).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("ledger rows for %s recorded by generation 1: %d (%v)", key, rows, err)
	}
	if o := oc.list(); o[0].Transition != "succeeded" || o[0].Attempt != 2 {
		t.Fatalf("outcomes %+v", o)
	}
}

// sendMail is one handler function, registered unchanged on worker.Worker (PostgreSQL) and on
// tenurenats.Worker (JetStream) in TestSameHandlerOnBothEngines: its effect goes through
// worker.Effect on both, and its first attempt fails after the effect.
func sendMail(remoteURL string, seen chan<- string) func(ctx context.Context, job *generics.Job[mailArgs]) error {
	return func(ctx context.Context, job *generics.Job[mailArgs]) error {
		r, err := worker.Effect(ctx, job.JobRow, "send", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return testkit.CallRemote(ctx, remoteURL, call.Key, call.Generation)
		})
		if err != nil {
			return err
		}
		if job.Attempt == 1 {
			return errors.New("failing after the effect, once")
		}
		seen <- fmt.Sprintf("%s attempt=%d replayed=%t", job.Args.To, job.Attempt, r.Replayed)
		return nil
	}
}

// TestSameHandlerOnBothEngines moves a kind from PostgreSQL to JetStream by configuration: the
// same handler function and options run on both engines; both retry, replay the effect from
// their ledger on attempt 2, and the remote applies each job's effect once.
func TestSameHandlerOnBothEngines(t *testing.T) {
	e := newEnv(t)
	pool, _ := newPoolURL(t)
	remote := testkit.NewRemote(t)
	seen := make(chan string, 4)
	handler := sendMail(remote.URL, seen)
	opts := &worker.HandlerOptions{Lease: 2 * time.Second, MaxAttempts: 5, Retry: worker.FullJitter{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond},
		Upgraders: []generics.Upgrader{upgradeMailV1}}

	pw, err := worker.New(pool, &worker.Config{FetchPollMin: 10 * time.Millisecond, FetchPollMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(pw, handler, opts); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(nil)
	cfg.Pool = pool
	nw, err := tenurenats.NewWorker(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenurenats.Register(nw, handler, opts); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := pw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pw.Stop(context.Background()) })
	run(t, nw)

	jc, err := jobs.NewClient(pool, &jobs.Config{Registry: pw.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	var pgID int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		row, err := jc.InsertTx(ctx, tx, mailArgs{To: "pg@x"}, nil)
		if row != nil {
			pgID = row.Job.ID
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	res, err := tenurenats.Insert(ctx, e.client(t, nw.Registry()), mailArgs{To: "nats@x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case s := <-seen:
			got[s] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("only %v finished", got)
		}
	}
	if !got["pg@x attempt=2 replayed=true"] || !got["nats@x attempt=2 replayed=true"] {
		t.Fatalf("finished %v: want both on attempt 2 replaying their effect", got)
	}
	for _, key := range []string{fmt.Sprintf("job:%d:effect:send", pgID), fmt.Sprintf("nats:%s:job:%d:effect:send", e.name, res.Sequence)} {
		if calls, applied, _ := remote.Key(key); calls != 1 || applied != 1 {
			t.Errorf("remote key %s: %d calls, %d applied; want 1 and 1", key, calls, applied)
		}
	}
	if keys, _, _ := remote.Totals(); keys != 2 {
		t.Errorf("remote saw %d keys, want 2", keys)
	}
}

// TestInsertTxThroughTheOutbox: a typed job enqueued in a transaction runs only when the
// transaction commits — through the outbox, the relay and the JetStream worker.
func TestInsertTxThroughTheOutbox(t *testing.T) {
	e := newEnv(t)
	pool, _ := newPoolURL(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		got <- job.Args.To
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c := e.client(t, w.Registry())
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tenurenats.InsertTx(ctx, tx, c, mailArgs{To: "rolled-back@x"}, nil); err != nil {
			return err
		}
		return errors.New("the business write failed")
	}); err == nil {
		t.Fatal("expected the rollback")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { // invalid args: nothing written
		_, err := tenurenats.InsertTx(ctx, tx, c, mailArgs{}, nil)
		return err
	}); !errors.Is(err, generics.ErrInvalidPayload) {
		t.Fatalf("InsertTx with invalid args: %v", err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tenurenats.InsertTx(ctx, tx, c, mailArgs{To: "committed@x"}, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := tenurenats.NewRelay(pool, e.js, &tenurenats.RelayConfig{Stream: e.name, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Run(rctx) }()
	select {
	case to := <-got:
		if to != "committed@x" {
			t.Fatalf("handler got %q", to)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the committed job never ran")
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case to := <-got:
		t.Fatalf("a second job ran: %q", to)
	default:
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.outbox").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("outbox rows %d (%v), want the committed one", rows, err)
	}
}

// TestStreamLedgerFirstRecordWins: two attempts of one JetStream job that both ran the effect
// (a stalled attempt whose message was redelivered meanwhile) both end with the result the
// first recorder wrote; the later recorder sees it as replayed.
func TestStreamLedgerFirstRecordWins(t *testing.T) {
	pool, _ := newPoolURL(t)
	ctx := context.Background()
	ledger := tenurenats.NewStreamLedger(pool, "S", 7)
	attempt := func(n int) (*generics.Job[mailArgs], context.Context) {
		token := uuid.New()
		job := &generics.Job[mailArgs]{JobRow: &generics.JobRow{ID: 7, Attempt: n, Generation: int64(n), ClaimToken: &token}}
		return job, worker.WithExternalAttempt(ctx, worker.ExternalAttempt{Job: job.JobRow, KeyPrefix: "nats:S:", Ledger: ledger})
	}
	j1, ctx1 := attempt(1)
	j2, ctx2 := attempt(2)
	second := make(chan worker.EffectResult[string], 1)
	r1, err := worker.Effect(ctx1, j1.JobRow, "send", func(context.Context, worker.EffectCall) (string, error) {
		// Attempt 1 ran its effect; before it records, attempt 2 runs and records first.
		r2, err := worker.Effect(ctx2, j2.JobRow, "send", func(_ context.Context, call worker.EffectCall) (string, error) {
			if call.Key != "nats:S:job:7:effect:send" || call.Generation != 2 {
				t.Errorf("attempt 2 call %+v", call)
			}
			return "by-2", nil
		})
		if err != nil {
			t.Error(err)
		}
		second <- r2
		return "by-1", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	if r2.Value != "by-2" || r2.Replayed || r2.Generation != 2 {
		t.Errorf("attempt 2: %+v, want its own result", r2)
	}
	if r1.Value != "by-2" || !r1.Replayed || r1.Generation != 2 {
		t.Errorf("attempt 1: %+v, want attempt 2's recorded result, replayed", r1)
	}
	_, ctx3 := attempt(3)
	token := uuid.New()
	j3 := &generics.Job[mailArgs]{JobRow: &generics.JobRow{ID: 7, Attempt: 3, Generation: 3, ClaimToken: &token}}
	if _, err := worker.Effect(ctx3, j3.JobRow, "send", func(context.Context, worker.EffectCall) (string, error) { return "", nil }); !errors.Is(err, worker.ErrNotInHandler) {
		t.Errorf("Effect with a job that is not the context's attempt: %v, want ErrNotInHandler", err)
	}
	if _, err := worker.Effect(ctx, j3.JobRow, "send", func(context.Context, worker.EffectCall) (string, error) { return "", nil }); !errors.Is(err, worker.ErrNotInHandler) {
		t.Errorf("Effect outside any handler: %v, want ErrNotInHandler", err)
	}
}

// TestJobNewerPayloadVersionRetried: a payload newer than the worker's version is not handed
// to the handler and not killed as undecodable at once: it is retried (UNKNOWN_KIND) and ends
// dead at its attempt budget.
func TestJobNewerPayloadVersionRetried(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	w, err := tenurenats.NewWorker(e.js, e.config(oc.add))
	if err != nil {
		t.Fatal(err)
	}
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		t.Errorf("handler called with %+v", job.Args)
		return nil
	}, &worker.HandlerOptions{Retry: worker.FullJitter{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	m := nats.NewMsg(e.prefix + ".jobs.mail")
	m.Header.Set(tenurenats.HeaderKind, "mail")
	m.Header.Set(tenurenats.HeaderVersion, "3")
	m.Header.Set(tenurenats.HeaderMaxAttempts, "3")
	m.Data = []byte(`{"to":"a@b","new_field":1}`)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the job to end", oc.final(1))
	var got []string
	for _, o := range oc.list() {
		got = append(got, fmt.Sprintf("%d:%s:%s", o.Attempt, o.Transition, o.Code))
	}
	if fmt.Sprint(got) != "[1:retried:UNKNOWN_KIND 2:retried:UNKNOWN_KIND 3:dead:UNKNOWN_KIND]" {
		t.Fatalf("outcomes %v", got)
	}
}

// TestWorkerStopReleasesRunningJobs: when Run's context ends, a handler that does not finish
// within StopTimeout has its context cancelled (worker.ErrWorkerStopping), its message is
// Nak'ed, Run returns, and the job runs again on the next worker (attempt 2).
func TestWorkerStopReleasesRunningJobs(t *testing.T) {
	e := newEnv(t)
	var oc outcomes
	cfg := e.config(oc.add)
	cfg.StopTimeout = 200 * time.Millisecond
	w1, err := tenurenats.NewWorker(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 4)
	causes := make(chan error, 4)
	handler := func(ctx context.Context, job *generics.Job[mailArgs]) error {
		started <- job.Attempt
		if job.Attempt == 1 {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	}
	if err := tenurenats.Register(w1, handler, &worker.HandlerOptions{Lease: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w1.Run(ctx) }()
	if _, err := tenurenats.Insert(context.Background(), e.client(t, nil), mailArgs{To: "stop@x"}, nil); err != nil {
		t.Fatal(err)
	}
	if a := <-started; a != 1 {
		t.Fatalf("first attempt %d", a)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after StopTimeout")
	}
	if c := <-causes; !errors.Is(c, worker.ErrWorkerStopping) {
		t.Fatalf("handler context cause %v, want ErrWorkerStopping", c)
	}
	if o := oc.list(); len(o) != 1 || o[0].Transition != "released" {
		t.Fatalf("outcomes %+v, want one release", o)
	}
	w2, err := tenurenats.NewWorker(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenurenats.Register(w2, handler, &worker.HandlerOptions{Lease: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	run(t, w2)
	select {
	case a := <-started: // the Nak made it available at once, well before the 5 s AckWait
		if a != 2 {
			t.Fatalf("next attempt %d, want 2", a)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the released job did not come back before its AckWait")
	}
}
