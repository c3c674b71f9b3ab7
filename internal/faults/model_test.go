package faults_test

// TestModelBased: a seeded, model-based test of the job state machine (docs/contract.md §1–§3,
// docs/design.md "State machine"). Several goroutines, each on its own connection, run random
// operations straight through the generated statements (db/gen) and the operator client
// against a fresh database, while an in-memory model tracks what every job must be. The
// model is updated from what the database returned; what is checked is what must hold
// whatever the interleaving:
//
//   - a fenced write (CompleteMany, FailMany, ReleaseMany, Heartbeat, the test's own fenced
//     lease-expiry UPDATE, the reclaim pair) changes a row iff the model says the caller's
//     token is the job's current one and the job is running (and, for a heartbeat, the lease
//     has not expired; a heartbeat within a few ms of its lease end may go either way);
//   - a claim returns only jobs the model has ready, due, in the claimed queue and of a kind
//     and payload version the claimer registered, with attempts+1 <= max_attempts, the next
//     generation, a token never seen before and the lease the claimer asked for;
//   - LockExpired returns exactly the running jobs whose lease expired (of those the sweep
//     holds), with their current token;
//   - Cancel and Reinject report what the model predicts (cancelled / cancel requested /
//     already final; reinjected / not dead) and write what they should;
//   - after every round a reconciliation compares every row (state, attempts, max_attempts,
//     generation, claim token, cancel request, lease window) with the model;
//   - at the end everything is drained to a final state (nothing may stay running or ready).
//
// Concurrency without ambiguity: every operation on known jobs holds their model entries
// (per-job mutexes, taken in id order) from before its statement until the model is updated,
// so the model of a job changes in the database's commit order. Claims pick unknown jobs, so
// they run under a shared gate that enqueues and operator cancels take exclusively (a cancel's
// outcome depends on whether a claim got there first; an enqueue's ids must be in the model
// before anyone can claim them). One reclaim sweep runs at a time.
//
// The seed (TENURE_MODEL_SEED, else the time) fixes every goroutine's choices, not the
// interleaving; violations print the job's recent history. TENURE_MODEL_STEPS sets the
// number of steps (default 5000, ~15 s on 2 cores).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// Two kinds: model.b is enqueued at payload version 2, so a claimer that knows only version 1
// of it must leave those jobs alone.
type modelA struct {
	N int `json:"n"`
}

func (modelA) Kind() string        { return "model.a" }
func (modelA) PayloadVersion() int { return 1 }

type modelB struct {
	N int `json:"n"`
}

func (modelB) Kind() string        { return "model.b" }
func (modelB) PayloadVersion() int { return 2 }

const (
	modelSlack    = 25 * time.Millisecond // clock rounding between Go and the database (same host)
	modelJobLease = 2 * time.Second       // lease_ms at enqueue
	modelClaimMs  = 1000                  // the claimers' per-kind lease when they declare one
	modelQueue    = "default"
	modelOther    = "other"
	modelRound    = 200 // steps (all goroutines together) between reconciliations
)

type mJob struct {
	mu          sync.Mutex
	id          int64
	queue, kind string
	version     int32
	state       string
	attempts    int32
	maxAttempts int32
	gen         int64
	token       *uuid.UUID // the row's claim_token (kept by succeeded/dead/cancelled)
	cancelReq   bool
	leaseMs     int32
	runLo       time.Time // run_at lies in [runLo, runHi] (Go clock)
	runHi       time.Time
	luLo        time.Time // locked_until lies in [luLo, luHi] while running
	luHi        time.Time
	hist        []string
}

func (j *mJob) final() bool {
	return j.state == "succeeded" || j.state == "dead" || j.state == "cancelled"
}

func (j *mJob) owns(tok uuid.UUID) bool {
	return j.state == "running" && j.token != nil && *j.token == tok
}

type modelRun struct {
	t      *testing.T
	pool   *pgxpool.Pool
	client *jobs.Client
	start  time.Time

	gate      sync.RWMutex // claims: shared; enqueue, cancel: exclusive
	reclaimMu sync.Mutex

	mu      sync.Mutex
	jobs    map[int64]*mJob
	ids     []int64
	tokens  map[uuid.UUID]int64
	tokList []uuid.UUID
	issued  map[[2]int64]bool // (job, generation) handed out

	vmu        sync.Mutex
	violations map[string][]string
	vcount     map[string]int
	ops        map[string]int
	wrongJobs  map[int64]bool
}

func (m *modelRun) since() string {
	return strconv.FormatFloat(time.Since(m.start).Seconds(), 'f', 3, 64) + "s"
}

// note appends to a job's history; the caller holds j.mu.
func (m *modelRun) note(j *mJob, g int, format string, args ...any) {
	j.hist = append(j.hist, fmt.Sprintf("%s g%d %s", m.since(), g, fmt.Sprintf(format, args...)))
	if len(j.hist) > 30 {
		j.hist = j.hist[len(j.hist)-30:]
	}
}

// violation records a broken check about job j (nil: not about one job); the caller holds
// j.mu when j is not nil.
func (m *modelRun) violation(cat string, j *mJob, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if j != nil {
		msg = fmt.Sprintf("job %d: %s\n    history:\n      %s", j.id, msg, strings.Join(j.hist, "\n      "))
	}
	m.vmu.Lock()
	defer m.vmu.Unlock()
	m.vcount[cat]++
	if len(m.violations[cat]) < 4 {
		m.violations[cat] = append(m.violations[cat], msg)
	}
}

func (m *modelRun) count(op string) {
	m.vmu.Lock()
	m.ops[op]++
	m.vmu.Unlock()
}

func (m *modelRun) job(id int64) *mJob {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobs[id]
}

// lockJobs locks the model entries of ids (deduplicated, in id order) and returns them.
func (m *modelRun) lockJobs(ids []int64) []*mJob {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var out []*mJob
	for _, id := range ids {
		if j := m.job(id); j != nil {
			j.mu.Lock()
			out = append(out, j)
		}
	}
	return out
}

func unlockJobs(js []*mJob) {
	for _, j := range js {
		j.mu.Unlock()
	}
}

func (m *modelRun) addToken(tok uuid.UUID, id, gen int64) (dupToken, dupGen bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tokens[tok]; ok {
		dupToken = true
	}
	m.tokens[tok] = id
	m.tokList = append(m.tokList, tok)
	k := [2]int64{id, gen}
	dupGen = m.issued[k]
	m.issued[k] = true
	return
}

type heldTok struct {
	id  int64
	tok uuid.UUID
}

type mWorker struct {
	m    *modelRun
	g    int
	r    *rand.Rand
	conn *pgxpool.Conn
	q    *gen.Queries
	wid  string
	held []heldTok
}

func tokEq(a *uuid.UUID, b uuid.UUID) bool { return a != nil && *a == b }

func tokStr(a *uuid.UUID) string {
	if a == nil {
		return "null"
	}
	return a.String()[:8]
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

func (w *mWorker) enqueue(ctx context.Context) {
	m := w.m
	m.gate.Lock()
	defer m.gate.Unlock()
	n := 1 + w.r.IntN(5)
	type spec struct {
		opts    jobs.InsertOpts
		kind    string
		version int32
	}
	specs := make([]spec, n)
	ps := make([]jobs.InsertManyParams, n)
	for i := range specs {
		o := jobs.InsertOpts{Queue: modelQueue, Priority: 1 + w.r.IntN(9), MaxAttempts: 1 + w.r.IntN(4), Lease: modelJobLease}
		if w.r.IntN(7) == 0 {
			o.Queue = modelOther
		}
		if w.r.IntN(2) == 0 {
			o.Delay = time.Duration(w.r.IntN(800)) * time.Millisecond
		}
		s := spec{opts: o, kind: "model.a", version: 1}
		if w.r.IntN(10) < 3 {
			s.kind, s.version = "model.b", 2
			ps[i] = jobs.InsertManyParams{Args: modelB{N: i}, Opts: &specs[i].opts}
		} else {
			ps[i] = jobs.InsertManyParams{Args: modelA{N: i}, Opts: &specs[i].opts}
		}
		specs[i] = s
	}
	before := time.Now()
	var ids []int64
	exact := map[int]time.Time{}
	if n == 1 && w.r.IntN(2) == 0 {
		m.count("insert")
		var res *jobs.InsertResult
		var err error
		if specs[0].kind == "model.a" {
			res, err = m.client.Insert(ctx, modelA{N: 1}, &specs[0].opts)
		} else {
			res, err = m.client.Insert(ctx, modelB{N: 1}, &specs[0].opts)
		}
		if err != nil {
			m.violation("unexpected-error", nil, "Insert: %v", err)
			return
		}
		row := res.Job
		if row.State != generics.JobStateReady || row.Attempt != 0 || row.Generation != 0 || row.ClaimToken != nil {
			m.violation("insert", nil, "Insert returned %+v", row)
		}
		ids = []int64{row.ID}
		exact[0] = row.RunAt
	} else {
		m.count("insert-many")
		res, err := m.client.InsertMany(ctx, ps)
		if err != nil {
			m.violation("unexpected-error", nil, "InsertMany: %v", err)
			return
		}
		for _, r := range res {
			ids = append(ids, r.Job.ID)
		}
	}
	after := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		if m.jobs[id] != nil {
			m.violation("insert", nil, "id %d handed out twice", id)
			continue
		}
		s := specs[i]
		j := &mJob{id: id, queue: s.opts.Queue, kind: s.kind, version: s.version, state: "ready",
			maxAttempts: int32(s.opts.MaxAttempts), leaseMs: int32(modelJobLease.Milliseconds()),
			runLo: before.Add(s.opts.Delay), runHi: after.Add(s.opts.Delay)}
		if at, ok := exact[i]; ok {
			j.runLo, j.runHi = at, at
		}
		m.note(j, w.g, "enqueued queue=%s kind=%s max=%d delay=%v", j.queue, j.kind, j.maxAttempts, s.opts.Delay)
		m.jobs[id] = j
		m.ids = append(m.ids, id)
	}
}

// claim runs ClaimStrict; force (drain) claims every kind and version from queue.
func (w *mWorker) claim(ctx context.Context, queue string, force bool) int {
	m := w.m
	m.count("claim")
	vB := int32(1 + w.r.IntN(2))
	kl := []int32{0, 0}
	for i := range kl {
		if w.r.IntN(2) == 0 {
			kl[i] = modelClaimMs
		}
	}
	batch := 1 + w.r.IntN(5)
	if force {
		vB, batch = 2, 20
	}
	m.gate.RLock()
	defer m.gate.RUnlock()
	before := time.Now()
	got, err := w.q.ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: w.wid, Kinds: []string{"model.a", "model.b"},
		KindVersions: []int32{1, vB}, KindLeaseMs: kl, Queue: queue, Batch: int32(batch)})
	after := time.Now()
	if err != nil {
		m.violation("unexpected-error", nil, "ClaimStrict: %v", err)
		return 0
	}
	rows := ownedModelRows(got)
	if len(rows) == 0 && len(got) != 1 {
		m.violation("claim", nil, "ClaimStrict owned nothing but returned %d rows, want the one feedback row", len(got))
	}
	if len(rows) > batch {
		m.violation("claim", nil, "ClaimStrict returned %d rows for a batch of %d", len(rows), batch)
	}
	for _, row := range rows {
		j := m.job(row.ID)
		if j == nil {
			m.violation("claim", nil, "claimed job %d unknown to the model", row.ID)
			continue
		}
		j.mu.Lock()
		switch {
		case j.state != "ready":
			m.violation("claim-not-ready", j, "claimed while the model has it %s", j.state)
		case j.runLo.After(after.Add(modelSlack)):
			m.violation("claim-not-due", j, "claimed %v before it is due", j.runLo.Sub(after))
		}
		if row.Queue != queue || j.queue != queue {
			m.violation("claim-queue", j, "claim on queue %s returned a job of queue %s", queue, j.queue)
		}
		if row.Kind != j.kind || row.PayloadVersion != j.version || (j.kind == "model.b" && j.version > vB) {
			m.violation("claim-kind", j, "claimer knowing model.b up to v%d got %s v%d", vB, row.Kind, row.PayloadVersion)
		}
		if row.Attempts != j.attempts+1 || row.Attempts > row.MaxAttempts || row.MaxAttempts != j.maxAttempts {
			m.violation("claim-attempts", j, "claim returned attempts %d/%d, model %d/%d", row.Attempts, row.MaxAttempts, j.attempts, j.maxAttempts)
		}
		if row.Generation != j.gen+1 {
			m.violation("claim-generation", j, "claim returned generation %d, model %d", row.Generation, j.gen)
		}
		lease, k := j.leaseMs, 0
		if row.Kind == "model.b" {
			k = 1
		}
		if kl[k] != 0 {
			lease = kl[k]
		}
		if row.LeaseMs != lease {
			m.violation("claim-lease", j, "claim wrote lease_ms %d, want %d", row.LeaseMs, lease)
		}
		d := time.Duration(row.LeaseMs) * time.Millisecond
		if row.LockedUntil == nil || row.LockedUntil.Before(before.Add(d-modelSlack)) || row.LockedUntil.After(after.Add(d+modelSlack)) {
			m.violation("claim-lease", j, "locked_until %v not within [%v, %v] + lease", row.LockedUntil, before, after)
		}
		if row.ClaimToken == nil {
			m.violation("claim", j, "claim returned no token")
			j.mu.Unlock()
			continue
		}
		tok := *row.ClaimToken
		if dupT, dupG := m.addToken(tok, j.id, row.Generation); dupT || dupG {
			m.violation("claim-unique", j, "token reused=%t, generation %d handed out before=%t", dupT, row.Generation, dupG)
		}
		j.state, j.attempts, j.maxAttempts, j.gen, j.token, j.leaseMs = "running", row.Attempts, row.MaxAttempts, row.Generation, &tok, row.LeaseMs
		if row.LockedUntil != nil {
			j.luLo, j.luHi = *row.LockedUntil, *row.LockedUntil
		}
		m.note(j, w.g, "claimed gen=%d attempt=%d tok=%s lease=%dms", j.gen, j.attempts, tokStr(&tok), row.LeaseMs)
		j.mu.Unlock()
		w.held = append(w.held, heldTok{row.ID, tok})
	}
	if len(w.held) > 16 {
		w.held = w.held[len(w.held)-16:]
	}
	return len(rows)
}

// pick returns up to n held tokens of distinct jobs; with stale it swaps one for a token
// picked from all tokens ever issued (usually not the job's current one) or a fresh uuid.
func (w *mWorker) pick(n int, stale bool) []heldTok {
	var out []heldTok
	seen := map[int64]bool{}
	for _, i := range w.r.Perm(len(w.held)) {
		if len(out) >= n {
			break
		}
		if h := w.held[i]; !seen[h.id] {
			seen[h.id] = true
			out = append(out, h)
		}
	}
	if stale || len(out) == 0 {
		m := w.m
		m.mu.Lock()
		var h heldTok
		if len(m.ids) > 0 {
			h.id = m.ids[w.r.IntN(len(m.ids))]
			if len(m.tokList) > 0 && w.r.IntN(4) != 0 {
				h.tok = m.tokList[w.r.IntN(len(m.tokList))]
			} else {
				h.tok = uuid.New()
			}
		}
		m.mu.Unlock()
		if h.id != 0 && !seen[h.id] {
			if len(out) > 0 && len(out) >= n {
				out[w.r.IntN(len(out))] = h
			} else {
				out = append(out, h)
			}
		}
	}
	return out
}

func (w *mWorker) drop(landed map[int64]bool) {
	keep := w.held[:0]
	for _, h := range w.held {
		if !landed[h.id] || w.r.IntN(4) == 0 { // keep a few as stale tokens
			keep = append(keep, h)
		}
	}
	w.held = keep
}

func (w *mWorker) heartbeat(ctx context.Context) {
	m := w.m
	m.count("heartbeat")
	hs := w.pick(1+w.r.IntN(3), w.r.IntN(6) == 0)
	if len(hs) == 0 {
		return
	}
	sort.Slice(hs, func(a, b int) bool { return hs[a].id < hs[b].id })
	ids := make([]int64, len(hs))
	toks := make([]uuid.UUID, len(hs))
	for i, h := range hs {
		ids[i], toks[i] = h.id, h.tok
	}
	js := m.lockJobs(ids)
	defer unlockJobs(js)
	before := time.Now()
	rows, err := w.q.Heartbeat(ctx, gen.HeartbeatParams{Ids: ids, Tokens: toks})
	after := time.Now()
	if err != nil {
		m.violation("unexpected-error", nil, "Heartbeat: %v", err)
		return
	}
	got := map[int64]bool{}
	cr := map[int64]bool{}
	for _, r := range rows {
		got[r.ID] = true
		cr[r.ID] = r.CancelRequested
	}
	for _, h := range hs {
		j := m.job(h.id)
		owns := j.owns(h.tok)
		landed := got[h.id]
		switch {
		case !owns && landed:
			m.violation("fenced-heartbeat", j, "heartbeat with token %s landed; model: %s tok=%s", tokStr(&h.tok), j.state, tokStr(j.token))
		case owns && !landed && j.luLo.After(after.Add(modelSlack)):
			m.violation("fenced-heartbeat", j, "heartbeat of the owner refused with %v of lease left", j.luLo.Sub(after))
		case owns && landed && j.luHi.Before(before.Add(-modelSlack)):
			m.violation("fenced-heartbeat", j, "heartbeat extended a lease expired %v before", before.Sub(j.luHi))
		}
		if landed {
			if cr[h.id] != j.cancelReq {
				m.violation("heartbeat-cancel", j, "heartbeat says cancel_requested=%t, model %t", cr[h.id], j.cancelReq)
			}
			d := time.Duration(j.leaseMs) * time.Millisecond
			j.luLo, j.luHi = before.Add(d), after.Add(d)
			m.note(j, w.g, "heartbeat tok=%s landed", tokStr(&h.tok))
		} else if owns {
			// refused: the lease had ended by the statement's time
			if j.luHi.After(after) {
				j.luHi = after
			}
			if j.luLo.After(j.luHi) {
				j.luLo = j.luHi
			}
			m.note(j, w.g, "heartbeat tok=%s refused (lease over)", tokStr(&h.tok))
		}
	}
}

// finish kinds
const (
	finComplete = iota
	finFail
	finRelease
)

// finish writes a fenced finish for hs (all of them when given, else picked at random).
func (w *mWorker) finish(ctx context.Context, kind int, hs []heldTok, stale bool) {
	m := w.m
	if hs == nil {
		hs = w.pick(1+w.r.IntN(3), stale)
	}
	if len(hs) == 0 {
		return
	}
	sort.Slice(hs, func(a, b int) bool { return hs[a].id < hs[b].id })
	n := len(hs)
	ids := make([]int64, n)
	toks := make([]uuid.UUID, n)
	states := make([]string, n)
	delays := make([]int64, n)
	codes := make([]string, n)
	msgs := make([]string, n)
	for i, h := range hs {
		ids[i], toks[i] = h.id, h.tok
		delays[i] = int64(w.r.IntN(300)) * 1000
		switch x := w.r.IntN(10); {
		case x < 6:
			states[i], codes[i] = "ready", "HANDLER_ERROR"
		case x < 8:
			states[i], codes[i] = "dead", "PERMANENT"
		default:
			states[i], codes[i] = "cancelled", "CANCELLED"
		}
		msgs[i] = "model-based test"
	}
	js := m.lockJobs(ids)
	defer unlockJobs(js)
	var name string
	got := map[int64]string{}
	before := time.Now()
	var err error
	switch kind {
	case finComplete:
		name = "CompleteMany"
		var rows []*gen.CompleteManyRow
		rows, err = w.q.CompleteMany(ctx, gen.CompleteManyParams{Ids: ids, Tokens: toks})
		for _, r := range rows {
			if !r.Busy { // busy: another session held the row (not expected under the model's lock): not landed
				got[r.ID] = "succeeded"
			}
		}
	case finFail:
		name = "FailMany"
		var rows []*gen.FailManyRow
		rows, err = w.q.FailMany(ctx, gen.FailManyParams{Ids: ids, Tokens: toks, States: states, DelayUs: delays, Codes: codes, Messages: msgs})
		for _, r := range rows {
			if !r.Busy {
				got[r.ID] = string(r.State)
			}
		}
	case finRelease:
		name = "ReleaseMany"
		var rows []*gen.ReleaseManyRow
		rows, err = w.q.ReleaseMany(ctx, gen.ReleaseManyParams{Ids: ids, Tokens: toks, DelayUs: delays})
		for _, r := range rows {
			if !r.Busy {
				got[r.ID] = string(r.State)
			}
		}
	}
	after := time.Now()
	m.count(name)
	// What the contract predicts for each row.
	want := make([]string, n)
	for i, h := range hs {
		j := m.job(h.id)
		if !j.owns(h.tok) {
			continue
		}
		switch kind {
		case finComplete:
			want[i] = "succeeded"
		case finFail:
			want[i] = states[i]
			if states[i] == "ready" && j.cancelReq {
				// A retry of a job whose cancel was requested meanwhile ends cancelled, with
				// or without attempts left: the cancel wins, as in ReleaseMany and the
				// reclaim sweep (contract §2: running -> cancelled after a cancel request).
				want[i] = "cancelled"
			} else if states[i] == "ready" && j.attempts >= j.maxAttempts {
				want[i] = "dead"
			}
		case finRelease:
			want[i] = "ready"
			if j.cancelReq {
				want[i] = "cancelled"
			}
		}
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.ConstraintName == "jobs_cancel_request" {
			for i, h := range hs {
				if j := m.job(h.id); kind == finFail && states[i] == "ready" && want[i] == "cancelled" && j.owns(h.tok) {
					m.violation("defect-failmany-retry-after-cancel-request", j,
						"FailMany(state=ready) by the current owner (tok=%s, attempt %d/%d) of a running job with a pending cancel request "+
							"fails the whole batch of %d with %s (SQLSTATE %s) instead of changing the row: "+
							"the owner's write is refused although it holds the current token", tokStr(&h.tok), j.attempts, j.maxAttempts, n, pe.ConstraintName, pe.Code)
					m.note(j, w.g, "FailMany(ready) tok=%s refused by CHECK %s", tokStr(&h.tok), pe.ConstraintName)
				}
			}
			return
		}
		m.violation("unexpected-error", nil, "%s: %v", name, err)
		return
	}
	landedIDs := map[int64]bool{}
	for i, h := range hs {
		j := m.job(h.id)
		st, landed := got[h.id]
		if (want[i] != "") != landed {
			m.violation("fenced-"+name, j, "%s with token %s landed=%t; model: %s tok=%s", name, tokStr(&h.tok), landed, j.state, tokStr(j.token))
		}
		if !landed {
			continue
		}
		landedIDs[h.id] = true
		if want[i] != "" && st != want[i] {
			m.violation("finish-state", j, "%s ended the job %s, model predicts %s (attempt %d/%d, cancel requested %t)",
				name, st, want[i], j.attempts, j.maxAttempts, j.cancelReq)
		}
		switch st {
		case "ready":
			if kind == finRelease && j.attempts > 0 {
				j.attempts--
			}
			j.token = nil
			d := time.Duration(delays[i]) * time.Microsecond
			j.runLo, j.runHi = before.Add(d), after.Add(d)
		}
		j.state = st
		m.note(j, w.g, "%s tok=%s -> %s", name, tokStr(&h.tok), st)
	}
	w.drop(landedIDs)
}

// expire moves the lease end of a held job into the past with a fenced UPDATE (the test's
// stand-in for waiting the lease out).
func (w *mWorker) expire(ctx context.Context, h heldTok) {
	m := w.m
	m.count("expire")
	js := m.lockJobs([]int64{h.id})
	defer unlockJobs(js)
	if len(js) == 0 {
		return
	}
	j := js[0]
	before := time.Now()
	tag, err := w.conn.Exec(ctx, `UPDATE tenure.jobs SET locked_until = now() - interval '2 seconds'
		WHERE id = $1 AND state = 'running' AND claim_token = $2`, h.id, h.tok)
	after := time.Now()
	if err != nil {
		m.violation("unexpected-error", j, "expire: %v", err)
		return
	}
	landed := tag.RowsAffected() == 1
	if landed != j.owns(h.tok) {
		m.violation("fenced-expire", j, "fenced expiry with token %s landed=%t; model: %s tok=%s", tokStr(&h.tok), landed, j.state, tokStr(j.token))
	}
	if landed {
		j.luLo, j.luHi = before.Add(-2*time.Second), after.Add(-2*time.Second)
		m.note(j, w.g, "lease forced into the past tok=%s", tokStr(&h.tok))
	}
}

// reclaim runs the sweep's pair, LockExpired + FailMany in one transaction (as
// worker.ReclaimExpired), for the expired jobs whose model entries it holds.
func (w *mWorker) reclaim(ctx context.Context) {
	m := w.m
	m.count("reclaim")
	m.reclaimMu.Lock()
	defer m.reclaimMu.Unlock()
	// The sweep's LockExpired locks every expired row it finds (FOR UPDATE SKIP LOCKED), not only
	// the ones this step read beforehand: a lease forced into the past after such a pre-read,
	// whose row the sweep then locks, would make its owner's finish skip the row (busy) while
	// the model expects it to land. So the sweep holds the model entry of every job, like any
	// operation holds those of the rows it may change.
	m.mu.Lock()
	cand := make([]int64, 0, len(m.jobs))
	for id := range m.jobs {
		cand = append(cand, id)
	}
	m.mu.Unlock()
	js := m.lockJobs(cand)
	defer unlockJobs(js)
	mine := map[int64]*mJob{}
	for _, j := range js {
		mine[j.id] = j
	}
	before := time.Now()
	var locked []*gen.LockExpiredRow
	var failed []*gen.FailManyRow
	var mid time.Time
	arg := gen.FailManyParams{}
	err := pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
		q := w.q.WithTx(tx)
		var err error
		if locked, err = q.LockExpired(ctx, 1000); err != nil {
			return err
		}
		mid = time.Now()
		arg = gen.FailManyParams{}
		for _, r := range locked {
			if mine[r.ID] == nil || r.ClaimToken == nil {
				continue
			}
			state, delay := "ready", int64(w.r.IntN(200))*1000
			switch {
			case r.CancelRequested:
				state = "cancelled"
			case r.Attempts >= r.MaxAttempts:
				state = "dead"
			}
			arg.Ids = append(arg.Ids, r.ID)
			arg.Tokens = append(arg.Tokens, *r.ClaimToken)
			arg.States = append(arg.States, state)
			arg.DelayUs = append(arg.DelayUs, delay)
			arg.Codes = append(arg.Codes, "LEASE_EXPIRED")
			arg.Messages = append(arg.Messages, "lease expired (model-based test)")
		}
		if len(arg.Ids) == 0 {
			return nil
		}
		failed, err = q.FailMany(ctx, arg)
		return err
	})
	if err != nil {
		m.violation("unexpected-error", nil, "reclaim: %v", err)
		return
	}
	returned := map[int64]*gen.LockExpiredRow{}
	for _, r := range locked {
		returned[r.ID] = r
		j := mine[r.ID]
		if j == nil {
			m.mu.Lock()
			owner, known := m.tokens[derefTok(r.ClaimToken)]
			m.mu.Unlock()
			if !known || owner != r.ID {
				m.violation("reclaim", nil, "LockExpired returned job %d with a token never issued for it", r.ID)
			}
			continue
		}
		switch {
		case j.state != "running" || !tokEq(j.token, derefTok(r.ClaimToken)):
			m.violation("reclaim-not-owned", j, "LockExpired returned tok=%s; model: %s tok=%s", tokStr(r.ClaimToken), j.state, tokStr(j.token))
		case j.luLo.After(mid.Add(modelSlack)):
			m.violation("reclaim-unexpired", j, "LockExpired returned a lease that ends %v later", j.luLo.Sub(mid))
		}
		if r.Attempts != j.attempts || r.MaxAttempts != j.maxAttempts || r.CancelRequested != j.cancelReq {
			m.violation("reclaim", j, "LockExpired row attempts=%d/%d cancel=%t, model %d/%d cancel=%t",
				r.Attempts, r.MaxAttempts, r.CancelRequested, j.attempts, j.maxAttempts, j.cancelReq)
		}
	}
	for _, j := range js {
		if _, ok := returned[j.id]; !ok && j.state == "running" && j.luHi.Before(before.Add(-modelSlack)) {
			m.violation("reclaim-missed", j, "LockExpired skipped a running job whose lease ended %v before", before.Sub(j.luHi))
		}
	}
	got := map[int64]string{}
	for _, r := range failed {
		got[r.ID] = string(r.State)
	}
	for i, id := range arg.Ids {
		j := mine[id]
		st, landed := got[id]
		if !landed {
			if j.owns(arg.Tokens[i]) {
				m.violation("fenced-reclaim", j, "the sweep's FailMany with the current token changed nothing")
			}
			continue
		}
		want := arg.States[i]
		if st != want {
			m.violation("finish-state", j, "reclaim ended the job %s, want %s", st, want)
		}
		j.state = st
		if st == "ready" {
			j.token = nil
			d := time.Duration(arg.DelayUs[i]) * time.Microsecond
			// now() is the transaction's start: between before and mid.
			j.runLo, j.runHi = before.Add(d), mid.Add(d)
		}
		m.note(j, w.g, "reclaimed (LEASE_EXPIRED) tok=%s -> %s", tokStr(&arg.Tokens[i]), st)
	}
}

func derefTok(t *uuid.UUID) uuid.UUID {
	if t == nil {
		return uuid.Nil
	}
	return *t
}

var modelAct = jobs.Action{Actor: "model-test", Reason: "model-based test of the state machine"}

func (w *mWorker) randomJob(pred func(*mJob) bool) int64 {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ids) == 0 {
		return 0
	}
	if pred != nil {
		for range 8 {
			id := m.ids[w.r.IntN(len(m.ids))]
			j := m.jobs[id]
			if j.mu.TryLock() {
				ok := pred(j)
				j.mu.Unlock()
				if ok {
					return id
				}
			}
		}
	}
	return m.ids[w.r.IntN(len(m.ids))]
}

func (w *mWorker) cancel(ctx context.Context) {
	m := w.m
	m.count("cancel")
	id := w.randomJob(func(j *mJob) bool { return !j.final() })
	if id == 0 {
		return
	}
	if w.r.IntN(30) == 0 {
		id = 1 << 40 // no such job
	}
	m.gate.Lock()
	defer m.gate.Unlock()
	if id == 1<<40 {
		if out, err := m.client.Cancel(ctx, id, modelAct); !errors.Is(err, jobs.ErrNotFound) {
			m.violation("cancel", nil, "Cancel of a missing job: %v, %v", out, err)
		}
		return
	}
	js := m.lockJobs([]int64{id})
	defer unlockJobs(js)
	j := js[0]
	out, err := m.client.Cancel(ctx, id, modelAct)
	var se *jobs.StateError
	switch j.state {
	case "ready":
		if err != nil || out != jobs.Cancelled {
			m.violation("cancel", j, "Cancel of a ready job: %v, %v", out, err)
			return
		}
		j.state, j.cancelReq = "cancelled", true
	case "running":
		if err != nil || out != jobs.CancelRequested {
			m.violation("cancel", j, "Cancel of a running job: %v, %v", out, err)
			return
		}
		j.cancelReq = true
	default:
		if !errors.As(err, &se) || !errors.Is(err, jobs.ErrAlreadyFinal) || string(se.State) != j.state {
			m.violation("cancel", j, "Cancel of a %s job: %v, %v", j.state, out, err)
		}
		return
	}
	m.note(j, w.g, "operator cancel -> %s", out)
}

func (w *mWorker) reinject(ctx context.Context) {
	m := w.m
	m.count("reinject")
	id := w.randomJob(func(j *mJob) bool { return j.state == "dead" })
	if id == 0 {
		return
	}
	var opts *jobs.ReinjectOpts
	if w.r.IntN(2) == 0 {
		opts = &jobs.ReinjectOpts{MaxAttempts: 1 + w.r.IntN(4)}
	}
	js := m.lockJobs([]int64{id})
	defer unlockJobs(js)
	j := js[0]
	row, err := m.client.Reinject(ctx, id, modelAct, opts)
	if j.state != "dead" {
		var se *jobs.StateError
		// A ready job may have been claimed a moment ago by a claim not yet in the model
		// (claims are gated against cancels and enqueues only): it may be found running.
		if !errors.As(err, &se) || !errors.Is(err, jobs.ErrNotDead) ||
			(string(se.State) != j.state && (j.state != "ready" || se.State != generics.JobStateRunning)) {
			m.violation("reinject", j, "Reinject of a %s job: %v", j.state, err)
		}
		return
	}
	if err != nil {
		m.violation("reinject", j, "Reinject of a dead job: %v", err)
		return
	}
	wantMax := j.maxAttempts
	if opts != nil {
		wantMax = int32(opts.MaxAttempts)
	}
	if row.State != generics.JobStateReady || row.Attempt != 0 || row.Generation != j.gen || row.ClaimToken != nil ||
		row.CancelRequestedAt != nil || int32(row.MaxAttempts) != wantMax || row.FinishedAt != nil {
		m.violation("reinject", j, "Reinject wrote state=%s attempts=%d gen=%d (model %d) tok=%v max=%d (want %d)",
			row.State, row.Attempt, row.Generation, j.gen, row.ClaimToken, row.MaxAttempts, wantMax)
	}
	j.state, j.attempts, j.token, j.cancelReq, j.maxAttempts = "ready", 0, nil, false, int32(row.MaxAttempts)
	j.runLo, j.runHi = row.RunAt, row.RunAt
	m.note(j, w.g, "operator reinject max=%d", j.maxAttempts)
}

// step runs one random operation.
func (w *mWorker) step(ctx context.Context) {
	m := w.m
	m.mu.Lock()
	njobs := len(m.ids)
	m.mu.Unlock()
	x := w.r.IntN(100)
	switch {
	case x < 8 && njobs < 400:
		w.enqueue(ctx)
	case x < 30:
		q := modelQueue
		if w.r.IntN(6) == 0 {
			q = modelOther
		}
		w.claim(ctx, q, false)
	case x < 45:
		w.heartbeat(ctx)
	case x < 55:
		w.finish(ctx, finComplete, nil, w.r.IntN(7) == 0)
	case x < 65:
		w.finish(ctx, finFail, nil, w.r.IntN(7) == 0)
	case x < 70:
		w.finish(ctx, finRelease, nil, w.r.IntN(7) == 0)
	case x < 76:
		if hs := w.pick(1, w.r.IntN(5) == 0); len(hs) > 0 {
			w.expire(ctx, hs[0])
		}
	case x < 84:
		w.reclaim(ctx)
	case x < 90:
		w.cancel(ctx)
	case x < 96:
		w.reinject(ctx)
	default:
		// stale writes only: tokens from anywhere
		w.finish(ctx, w.r.IntN(3), w.pick(0, true), true)
	}
}

// ---------------------------------------------------------------------------------------------
// Reconciliation and drain
// ---------------------------------------------------------------------------------------------

// reconcile compares every row with the model (no operation may be in flight).
func (m *modelRun) reconcile(ctx context.Context, when string) (lost, extra int) {
	rows, err := m.pool.Query(ctx, `SELECT id, state::text, attempts, max_attempts, generation, claim_token,
		cancel_requested_at IS NOT NULL, locked_until, (finished_at IS NOT NULL) FROM tenure.jobs`)
	require.NoError(m.t, err)
	seen := map[int64]bool{}
	var id, g int64
	var st string
	var att, maxAtt int32
	var tok *uuid.UUID
	var cr, fin bool
	var lu *time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &st, &att, &maxAtt, &g, &tok, &cr, &lu, &fin}, func() error {
		seen[id] = true
		j := m.jobs[id]
		if j == nil {
			extra++
			m.violation("reconcile-extra", nil, "%s: row %d not in the model", when, id)
			return nil
		}
		var diffs []string
		if st != j.state {
			diffs = append(diffs, fmt.Sprintf("state %s (model %s)", st, j.state))
		}
		if att != j.attempts || maxAtt != j.maxAttempts {
			diffs = append(diffs, fmt.Sprintf("attempts %d/%d (model %d/%d)", att, maxAtt, j.attempts, j.maxAttempts))
		}
		if g != j.gen {
			diffs = append(diffs, fmt.Sprintf("generation %d (model %d)", g, j.gen))
		}
		if (tok == nil) != (j.token == nil) || (tok != nil && *tok != *j.token) {
			diffs = append(diffs, fmt.Sprintf("token %s (model %s)", tokStr(tok), tokStr(j.token)))
		}
		if cr != j.cancelReq {
			diffs = append(diffs, fmt.Sprintf("cancel requested %t (model %t)", cr, j.cancelReq))
		}
		if fin != j.final() {
			diffs = append(diffs, fmt.Sprintf("finished_at set %t", fin))
		}
		if st == "running" && j.state == "running" && (lu == nil || lu.Before(j.luLo.Add(-modelSlack)) || lu.After(j.luHi.Add(modelSlack))) {
			diffs = append(diffs, fmt.Sprintf("locked_until %v outside [%v, %v]", lu, j.luLo, j.luHi))
		}
		if len(diffs) > 0 {
			m.wrongJobs[id] = true
			m.violation("reconcile", j, "%s: %s", when, strings.Join(diffs, ", "))
		}
		return nil
	})
	require.NoError(m.t, err)
	for _, id := range m.ids {
		if !seen[id] {
			lost++
			m.violation("reconcile-lost", m.jobs[id], "%s: row gone", when)
		}
	}
	return lost, extra
}

// drain takes every job to a final state: expire and reclaim what runs, claim and complete
// what is ready. It returns the jobs still not final at the deadline.
func (m *modelRun) drain(ctx context.Context, w *mWorker, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		var running []heldTok
		live := 0
		m.mu.Lock()
		for _, id := range m.ids {
			j := m.jobs[id]
			if !j.final() {
				live++
			}
			if j.state == "running" {
				running = append(running, heldTok{id, *j.token})
			}
		}
		m.mu.Unlock()
		if live == 0 || time.Now().After(deadline) {
			return live
		}
		for _, h := range running {
			w.expire(ctx, h)
		}
		w.reclaim(ctx)
		for _, q := range []string{modelQueue, modelOther} {
			for {
				w.held = nil
				n := w.claim(ctx, q, true)
				if n == 0 {
					break
				}
				w.finish(ctx, finComplete, slices.Clone(w.held), false)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

func TestModelBased(t *testing.T) {
	skipShort(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TENURE_MODEL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "TENURE_MODEL_SEED")
		seed = v
	}
	steps := envInt("TENURE_MODEL_STEPS", 5000)
	const workers = 4
	t.Logf("model-based test: seed=%d steps=%d goroutines=%d (rerun: TENURE_MODEL_SEED=%d)", seed, steps, workers, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed=%d: TENURE_MODEL_SEED=%d go test -count=1 -run TestModelBased -v ./internal/faults/", seed, seed)
		}
	})
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	client, err := jobs.NewClient(pool, &jobs.Config{Logger: testLogger()})
	require.NoError(t, err)
	m := &modelRun{t: t, pool: pool, client: client, start: time.Now(),
		jobs: map[int64]*mJob{}, tokens: map[uuid.UUID]int64{}, issued: map[[2]int64]bool{},
		violations: map[string][]string{}, vcount: map[string]int{}, ops: map[string]int{}, wrongJobs: map[int64]bool{}}

	ws := make([]*mWorker, workers)
	for i := range ws {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(conn.Release)
		ws[i] = &mWorker{m: m, g: i, r: rand.New(rand.NewPCG(seed, uint64(i))), conn: conn, q: gen.New(conn),
			wid: fmt.Sprintf("model-%d", i)}
	}
	for range 6 {
		ws[0].enqueue(ctx)
	}

	start := time.Now()
	done, rounds := 0, 0
	var lost, extra int
	for done < steps {
		per := min(modelRound, steps-done) / workers
		if per == 0 {
			per = 1
		}
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					w.step(ctx)
					time.Sleep(time.Duration(w.r.IntN(12)) * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		done += per * workers
		rounds++
		l, e := m.reconcile(ctx, fmt.Sprintf("round %d (step %d)", rounds, done))
		lost, extra = lost+l, extra+e
	}
	ran := time.Since(start)
	stuck := m.drain(ctx, ws[0], 20*time.Second)
	l, e := m.reconcile(ctx, "after drain")
	lost, extra = lost+l, extra+e

	states := map[string]int{}
	maxGen := int64(0)
	for _, id := range m.ids {
		j := m.jobs[id]
		states[j.state]++
		maxGen = max(maxGen, j.gen)
	}
	var opl []string
	for k, v := range m.ops {
		opl = append(opl, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(opl)
	t.Logf("ran %d steps in %v (%d rounds, %d reconciliations), drain %v; ops: %s; final states: %v; tokens issued %d, max generation %d",
		done, ran.Round(time.Millisecond), rounds, rounds+1, time.Since(start.Add(ran)).Round(time.Millisecond),
		strings.Join(opl, " "), states, len(m.tokList), maxGen)

	var cats []string
	total := 0
	for c, n := range m.vcount {
		cats = append(cats, c)
		total += n
	}
	sort.Strings(cats)
	for _, c := range cats {
		t.Errorf("%d violation(s) of %s; first ones:\n  %s", m.vcount[c], c, strings.Join(m.violations[c], "\n  "))
	}
	result(t, "model-based", tally{Jobs: len(m.ids), Lost: lost, Wrong: len(m.wrongJobs) + extra, Stuck: stuck}, "n/a",
		"steps="+strconv.Itoa(done), "seed="+strconv.FormatUint(seed, 10), "violations="+strconv.Itoa(total),
		"tokens="+strconv.Itoa(len(m.tokList)), "runtime="+ms(ran))
}

// modelClaimRow is an owned row of a claim statement (every claim returns the same nullable
// columns, and one row of NULLs when it owned nothing), with its columns dereferenced.
type modelClaimRow struct {
	ID                                             int64
	Queue, Kind                                    string
	PayloadVersion, Attempts, MaxAttempts, LeaseMs int32
	Generation                                     int64
	LockedUntil                                    *time.Time
	ClaimToken                                     *uuid.UUID
}

func ownedModelRows(got []*gen.ClaimStrictRow) []modelClaimRow {
	var rows []modelClaimRow
	for _, r := range got {
		if r.ID == nil { // the feedback-only row (the job columns are NOT NULL in an owned row)
			continue
		}
		rows = append(rows, modelClaimRow{ID: *r.ID, Queue: *r.Queue, Kind: *r.Kind, PayloadVersion: *r.PayloadVersion,
			Attempts: *r.Attempts, MaxAttempts: *r.MaxAttempts, LeaseMs: *r.LeaseMs, Generation: *r.Generation,
			LockedUntil: r.LockedUntil, ClaimToken: r.ClaimToken})
	}
	return rows
}
