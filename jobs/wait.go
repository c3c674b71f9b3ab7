package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// This file is awaiting a job's end (Client.Wait, WaitOutput, InsertAndWait). The schema's done
// channel ("tenure_done") carries the ids of the jobs that reached a final state: the engine
// sends them right after the commit of the finishes that ended them, up to 350 per notification
// (worker/internal/engine/donenotify.go, NotifyDoneMany: never inside the finish's own
// transaction, where the NOTIFY would hold PostgreSQL's notification lock through the WAL
// flush); operator actions and CompleteTx notify in their own transactions. A worker that dies
// between its commit and the signal leaves the waiter to the poll. All the waiters of a
// Client share one registry: one goroutine, one connection in LISTEN (taken out of the pool,
// Hijack), and one re-read statement (WaitFinal) for every waited id a notification names or
// the fallback poll covers. A waiter is checked against the row only after the LISTEN is
// established, so a job that finished before the waiter started is found by that read, and one
// that finishes after it by the notification: no wakeup is lost. A lost LISTEN connection is
// replaced with backoff; meanwhile, and always, the poll re-reads every waited id each
// WaitPoll, and after a reconnect every waited id is re-read at once.
//
// The waiters also announce their jobs to the workers: the first check of a newly waited id,
// and every awaitReannounce while it is still waited, runs WaitAnnounce, which notifies the
// schema's await channel ("tenure_await") with the ids that are not final yet. A worker that
// runs (or later claims) such a job writes its finish at once instead of holding it for
// worker.Config.FinishLinger (worker/finish.go, batcher), so a waiter does not pay the linger.
// The announcement is a hint about latency only: the wakeup itself is the done channel's, so a
// lost or late announcement costs at most the linger.
//
// Delete on success (worker.HandlerOptions.DeleteOnSuccess): the finish deletes the job's row
// and names it s<id> in the done signal. The reader remembers the last deletedMemory such ids
// it saw (whether or not they were waited for), so a waiter answered "no such row" while the
// registry listened learns that its job succeeded. An id no row has is answered ErrNotFound
// only when a second read, missingRecheck later, still finds no row and no signal named it:
// the signal of a delete that committed before the first read may still be on its way.

// DefaultWaitPoll is the default fallback poll interval of Wait (Config.WaitPoll).
const DefaultWaitPoll = time.Second

// waitIdle is how long the registry keeps its LISTEN connection without a waiter.
const waitIdle = 2 * time.Second

// waitChunk bounds the ids of one WaitFinal statement.
const waitChunk = 5000

// awaitReannounce is how often the ids still waited for are announced again on the await
// channel. Workers keep an announced id for at least 30 s (worker/finish.go, awaitKeep), so
// a job that waits longer than that to be claimed is still known as awaited when it finishes.
const awaitReannounce = 20 * time.Second

// deletedMemory bounds the ids of jobs deleted on success that the registry remembers.
const deletedMemory = 1 << 16

// missingRecheck is how long after a first "no such row" a waited id is read again before
// its waiters are answered ErrNotFound.
const missingRecheck = 100 * time.Millisecond

// holdListenWait bounds how long InsertAndWait waits for the registry's LISTEN before it
// inserts anyway (falling back to what a waiter that starts after the job's end sees).
const holdListenWait = 5 * time.Second

// ErrOutputNotKept means the awaited job succeeded but its row was deleted by its finish
// (worker.HandlerOptions.DeleteOnSuccess), so no output is stored: WaitOutput and
// InsertAndWait return it with a row whose ID and State (succeeded) are set, nothing else.
var ErrOutputNotKept = errors.New("tenure: job succeeded and was deleted on success; its output is not kept")

// ErrNotSucceeded means an awaited job reached a final state other than succeeded (dead or
// cancelled): WaitOutput and InsertAndWait return it as a *NotSucceededError with the row.
var ErrNotSucceeded = errors.New("tenure: job did not succeed")

// NotSucceededError reports the final state of an awaited job that did not succeed. It
// unwraps to ErrNotSucceeded.
type NotSucceededError struct {
	ID    int64
	State generics.JobState
	// Code is the job's last error code (empty when none was recorded, e.g. a ready job
	// cancelled by an operator).
	Code string
}

func (e *NotSucceededError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%v: job %d is %s", ErrNotSucceeded, e.ID, e.State)
	}
	return fmt.Sprintf("%v: job %d is %s (%s)", ErrNotSucceeded, e.ID, e.State, e.Code)
}

// Unwrap returns ErrNotSucceeded.
func (e *NotSucceededError) Unwrap() error { return ErrNotSucceeded }

// ErrOutputType means a succeeded job's output (worker.SetOutput) does not decode into the type
// WaitOutput or InsertAndWait was asked for.
var ErrOutputType = errors.New("tenure: job output does not decode into the requested type")

type waitResult struct {
	row     *generics.JobRow
	deleted bool // the job succeeded and its row was deleted (row has ID and State only)
	err     error
}

type waiter struct{ ch chan waitResult }

// waitReg is the registry of one Client's waiters.
type waitReg struct {
	c    *Client
	poll time.Duration

	mu      sync.Mutex
	waiters map[int64][]*waiter
	pending map[int64]bool // ids to re-read at the next check
	fresh   map[int64]bool // ids to announce (WaitAnnounce) at the next check
	running bool           // the registry goroutine runs
	kick    chan struct{}  // cap 1: a check is due

	missing   map[int64]bool     // ids read once with no row (answered ErrNotFound at the next read)
	deleted   map[int64]struct{} // ids the done signal named deleted on success (at most deletedMemory)
	delOrder  []int64            // deleted's ids, oldest first (a ring once full)
	delNext   int                // the ring's oldest entry once full
	holds     int                // InsertAndWait calls keeping the registry listening
	listening atomic.Bool        // the LISTEN connection is up
	recheck   atomic.Pointer[time.Timer]

	listens     atomic.Int64 // LISTEN connections opened (tests)
	checks      atomic.Int64 // WaitFinal statements run (tests)
	announce    atomic.Int64 // WaitAnnounce statements run (tests)
	connHook    func(*pgx.Conn)
	afterInsert func(id int64) // InsertAndWait, between the insert and the wait (tests)
}

func newWaitReg(c *Client, poll time.Duration) *waitReg {
	return &waitReg{c: c, poll: poll, waiters: map[int64][]*waiter{}, pending: map[int64]bool{}, fresh: map[int64]bool{},
		kick: make(chan struct{}, 1), missing: map[int64]bool{}, deleted: map[int64]struct{}{}}
}

// Wait blocks until the job id is in a final state (succeeded, dead or cancelled) and returns
// its row then, read after it got there (State, Output, Errors, FinishedAt). It returns
// ErrNotFound when no job has the id (or it was deleted while waited for), and ctx's error
// when ctx ends first. A job that is already final returns at once.
//
// A job of a kind that deletes on success (worker.HandlerOptions.DeleteOnSuccess) has no row
// once it succeeded: a waiter registered before that (or while this Client's registry was
// listening) gets a row with only ID and State (succeeded) set and a nil error; one that starts
// after the row is gone, with no waiter of this Client listening when the job's done signal was
// sent (just after its finish committed), gets ErrNotFound, as for a job pruned after its
// retention (docs/guide.md §28). InsertAndWait listens before it inserts.
//
// Guarantee: a job that reaches a final state is seen, from any process or machine that writes
// it, within about the notification's delivery (the finish's NOTIFY) or, when the notification
// is lost (the LISTEN connection broke), within Config.WaitPoll. A job re-injected after it
// was final may be returned in that earlier final state if the waiter read it before.
//
// Cost: all the waiters of a Client share one connection in LISTEN (outside the pool's
// count, kept until no waiter is left for 2 s), and one statement re-reads the waited jobs a
// notification names (or, every WaitPoll, all of them, plus a check that they still exist).
// Each waiter costs a goroutine and a map entry; 10,000 waiters cost one statement of 10,000
// primary-key reads per WaitPoll.
func (c *Client) Wait(ctx context.Context, id int64) (*generics.JobRow, error) {
	res := c.wait(ctx, id)
	return res.row, res.err
}

func (c *Client) wait(ctx context.Context, id int64) waitResult {
	r := c.waits
	w := &waiter{ch: make(chan waitResult, 1)}
	r.add(id, w)
	select {
	case res := <-w.ch:
		return res
	case <-ctx.Done():
		r.remove(id, w)
		select {
		case res := <-w.ch: // delivered in the meantime: the answer wins
			return res
		default:
		}
		return waitResult{err: ctx.Err()}
	}
}

// WaitOutput waits for the job id (Client.Wait) and decodes the output its handler recorded
// with worker.SetOutput into an R (R's zero value when it recorded none). A job that ended
// dead or cancelled returns its row and a *NotSucceededError (ErrNotSucceeded); an output that
// does not decode into R returns the row and an error wrapping ErrOutputType. A job deleted
// on success (worker.HandlerOptions.DeleteOnSuccess) returns a row with ID and State
// (succeeded) and ErrOutputNotKept: it succeeded, and its output, if any, is gone.
func WaitOutput[R any](ctx context.Context, c *Client, id int64) (*generics.JobRow, R, error) {
	var out R
	res := c.wait(ctx, id)
	row, err := res.row, res.err
	if err != nil {
		return row, out, err
	}
	if res.deleted {
		return row, out, fmt.Errorf("%w: job %d", ErrOutputNotKept, id)
	}
	if row.State != generics.JobStateSucceeded {
		return row, out, &NotSucceededError{ID: row.ID, State: row.State, Code: row.LastErrorCode}
	}
	if len(row.Output) > 0 {
		if err := json.Unmarshal(row.Output, &out); err != nil {
			return row, out, fmt.Errorf("%w: job %d: %w", ErrOutputType, row.ID, err)
		}
	}
	return row, out, nil
}

// InsertAndWait enqueues args (Client.Insert) and waits for the job's end (WaitOutput),
// returning its typed output. When ctx ends first the job stays enqueued: its error is
// ctx's, and the job's id is in the returned row's ID (the row as inserted).
func InsertAndWait[R any](ctx context.Context, c *Client, args generics.Args, opts *InsertOpts) (*generics.JobRow, R, error) {
	var out R
	// Listen first: a job deleted on success may end before Wait registers; the registry then
	// remembers its done signal.
	release := c.waits.hold(ctx)
	defer release()
	res, err := c.Insert(ctx, args, opts)
	if err != nil {
		return nil, out, err
	}
	if c.waits.afterInsert != nil {
		c.waits.afterInsert(res.Job.ID)
	}
	row, out, err := WaitOutput[R](ctx, c, res.Job.ID)
	if row == nil {
		row = res.Job
	}
	return row, out, err
}

func (r *waitReg) add(id int64, w *waiter) {
	r.mu.Lock()
	if len(r.waiters[id]) == 0 {
		r.fresh[id] = true
	}
	r.waiters[id] = append(r.waiters[id], w)
	r.pending[id] = true
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	signalKick(r.kick)
}

// hold keeps the registry running and listening until the returned func is called, and waits
// (at most holdListenWait, or until ctx ends) until its LISTEN is up.
func (r *waitReg) hold(ctx context.Context) func() {
	r.mu.Lock()
	r.holds++
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	deadline := time.Now().Add(holdListenWait)
	for !r.listening.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	return func() {
		r.mu.Lock()
		r.holds--
		r.mu.Unlock()
	}
}

// rememberDeleted records id as deleted on success; r.mu is held.
func (r *waitReg) rememberDeleted(id int64) {
	if _, ok := r.deleted[id]; ok {
		return
	}
	if len(r.delOrder) < deletedMemory {
		r.delOrder = append(r.delOrder, id)
	} else {
		delete(r.deleted, r.delOrder[r.delNext])
		r.delOrder[r.delNext] = id
		r.delNext = (r.delNext + 1) % deletedMemory
	}
	r.deleted[id] = struct{}{}
}

func (r *waitReg) remove(id int64, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[id]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(r.waiters, id)
		delete(r.pending, id)
		delete(r.fresh, id)
		delete(r.missing, id)
	} else {
		r.waiters[id] = ws
	}
}

func signalKick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run is the registry goroutine: it keeps the LISTEN connection, and runs the checks (one at
// a time: what becomes pending during a check is taken by the next one, in one statement).
func (r *waitReg) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		listening  bool
		connLost   = make(chan error, 1)
		conn       *listenConn
		backoff    = 100 * time.Millisecond
		nextDial   time.Time
		idleSince  time.Time
		pollTicker = time.NewTicker(r.poll)
		announce   = time.NewTicker(awaitReannounce)
	)
	defer pollTicker.Stop()
	defer announce.Stop()
	closeConn := func() {
		if conn != nil {
			conn.close()
			conn = nil
		}
		listening = false
		r.listening.Store(false)
	}
	defer closeConn()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		if !listening && !time.Now().Before(nextDial) {
			c, err := r.listen(ctx)
			if err != nil {
				nextDial = time.Now().Add(backoff)
				backoff = min(backoff*2, 2*time.Second)
				retry.Reset(backoff)
			} else {
				conn, listening, backoff = r.startReader(ctx, c, connLost), true, 100*time.Millisecond
				r.listening.Store(true)
				r.markAll() // notifications sent before the LISTEN are not ours: read every waited id
			}
		}
		if listening {
			r.check(ctx)
		}
		// Stop when no waiter is left for waitIdle.
		r.mu.Lock()
		empty := len(r.waiters) == 0 && r.holds == 0
		if empty && !idleSince.IsZero() && time.Since(idleSince) >= waitIdle {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if !empty {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = time.Now()
		}
		select {
		case <-r.kick:
		case <-pollTicker.C:
			r.markAll()
			r.check(ctx)
		case <-announce.C:
			r.markFresh()
			if listening {
				r.check(ctx)
			}
		case <-connLost:
			closeConn()
			nextDial = time.Now().Add(backoff)
			retry.Reset(backoff)
		case <-retry.C:
		}
	}
}

// listenConn is the registry's LISTEN connection and its reader.
type listenConn struct {
	conn   *pgx.Conn
	cancel context.CancelFunc // ends the reader
	done   chan struct{}      // closed when the reader returned
}

// startReader starts the reader of conn (read).
func (r *waitReg) startReader(ctx context.Context, conn *pgx.Conn, lost chan<- error) *listenConn {
	rctx, cancel := context.WithCancel(ctx)
	lc := &listenConn{conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(lc.done)
		r.read(rctx, conn, lost)
	}()
	return lc
}

// close ends the reader, waits for it (it uses the connection), then closes the connection.
func (lc *listenConn) close() {
	lc.cancel()
	<-lc.done
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = lc.conn.Close(cctx)
}

// listen opens the registry's LISTEN connection.
func (r *waitReg) listen(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pc, err := r.c.pool.Acquire(cctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack() // a LISTENing session must never go back to the pool
	if _, err := conn.Exec(cctx, "LISTEN "+r.c.sch.DoneChannel()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	r.listens.Add(1)
	if r.connHook != nil {
		r.connHook(conn)
	}
	return conn, nil
}

// read forwards the notified ids that have waiters to the pending set. It pings after 5 s
// without a notification, so a half-open connection is found and replaced.
func (r *waitReg) read(ctx context.Context, conn *pgx.Conn, lost chan<- error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed() {
				pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
				err = conn.Ping(pctx)
				pcancel()
				if err == nil {
					continue
				}
			}
			select {
			case lost <- err:
			default:
			}
			return
		}
		hit := false
		r.mu.Lock()
		for _, s := range strings.Split(n.Payload, ",") {
			del := strings.HasPrefix(s, "s") // deleted on success
			id, err := strconv.ParseInt(strings.TrimPrefix(s, "s"), 10, 64)
			if err != nil {
				continue
			}
			if del {
				r.rememberDeleted(id)
			}
			if _, ok := r.waiters[id]; ok {
				r.pending[id] = true
				hit = true
			}
		}
		r.mu.Unlock()
		if hit {
			signalKick(r.kick)
		}
	}
}

// markFresh makes every waited id announced again at the next check.
func (r *waitReg) markFresh() {
	r.mu.Lock()
	for id := range r.waiters {
		r.fresh[id] = true
	}
	r.mu.Unlock()
}

func (r *waitReg) markAll() {
	r.mu.Lock()
	for id := range r.waiters {
		r.pending[id] = true
	}
	r.mu.Unlock()
}

// check re-reads the pending ids and answers the waiters of those in a final state, and of
// those no job has (ErrNotFound). A statement that fails leaves its ids for the next poll.
func (r *waitReg) check(ctx context.Context) {
	r.mu.Lock()
	ids := make([]int64, 0, len(r.pending))
	for id := range r.pending {
		if _, ok := r.waiters[id]; ok {
			ids = append(ids, id)
		}
	}
	clear(r.pending)
	fresh := make([]int64, 0, len(r.fresh))
	for id := range r.fresh {
		if _, ok := r.waiters[id]; ok {
			fresh = append(fresh, id)
		}
	}
	clear(r.fresh)
	r.mu.Unlock()
	// Announce first, so that a job finishing meanwhile is written without its linger. A
	// failed announcement is not retried: it costs latency only.
	for len(fresh) > 0 {
		chunk := fresh[:min(len(fresh), waitChunk)]
		fresh = fresh[len(chunk):]
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = r.c.q.WaitAnnounce(qctx, chunk)
		cancel()
		r.announce.Add(1)
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), waitChunk)]
		ids = ids[len(chunk):]
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rows, err := r.c.q.WaitFinal(qctx, chunk)
		r.checks.Add(1)
		var gone []int64
		if err == nil && len(rows) < len(chunk) {
			// Every newly registered id is read here once: a missing one is answered now. (The
			// ids found final exist: a check of notified ids alone needs no second statement.)
			final := make(map[int64]bool, len(rows))
			for _, j := range rows {
				final[j.ID] = true
			}
			rest := make([]int64, 0, len(chunk)-len(rows))
			for _, id := range chunk {
				if !final[id] {
					rest = append(rest, id)
				}
			}
			gone, err = r.c.q.WaitMissing(qctx, rest)
		}
		cancel()
		if err != nil {
			continue // the poll tries again
		}
		r.mu.Lock()
		for _, j := range rows {
			r.deliver(j.ID, *j, nil)
		}
		again := false
		for _, id := range gone {
			switch _, del := r.deleted[id]; {
			case del:
				r.deliverDeleted(id)
			case !r.missing[id] && len(r.waiters[id]) > 0:
				// Its delete's done signal may still be on its way: read it once more.
				r.missing[id], again = true, true
			default:
				r.deliver(id, gen.TenureJob{}, fmt.Errorf("%w: %d", ErrNotFound, id))
			}
		}
		r.mu.Unlock()
		if again {
			r.recheckLater()
		}
	}
}

// recheckLater marks the ids read once with no row pending after missingRecheck.
func (r *waitReg) recheckLater() {
	t := time.AfterFunc(missingRecheck, func() {
		r.mu.Lock()
		for id := range r.missing {
			if _, ok := r.waiters[id]; ok {
				r.pending[id] = true
			}
		}
		r.mu.Unlock()
		signalKick(r.kick)
	})
	if old := r.recheck.Swap(t); old != nil {
		old.Stop()
	}
}

// deliverDeleted answers the waiters of a job deleted on success: a row with ID and State.
func (r *waitReg) deliverDeleted(id int64) {
	ws := r.waiters[id]
	delete(r.waiters, id)
	delete(r.missing, id)
	for _, w := range ws {
		w.ch <- waitResult{row: &generics.JobRow{ID: id, State: generics.JobStateSucceeded}, deleted: true}
	}
}

// deliver answers and removes the waiters of id; r.mu is held.
func (r *waitReg) deliver(id int64, j gen.TenureJob, err error) {
	ws := r.waiters[id]
	if len(ws) == 0 {
		return
	}
	delete(r.waiters, id)
	delete(r.missing, id)
	for _, w := range ws {
		res := waitResult{err: err}
		if err == nil {
			res.row, res.err = rowFromGen(j) // each waiter its own copy
		}
		w.ch <- res
	}
}
