package engine

import (
	"sync"
	"time"
)

// This file is the worker-wide slot pool (Config.Slots > 0; worker.Config.Slots): handler
// slots the queues of one worker share. A queue runs at most its own Concurrency handlers (its
// cap, as without a pool), and all queues together at most Slots. Without a pool (Slots 0, the
// default) every queue has its Concurrency slots to itself and nothing here runs.
//
// Why: a worker serving many queues with a few slots each claims one or two jobs per queue per
// claim; each job costs its queue a round trip, and each request of a batched claim
// (claimbatch.go) costs the statement an index probe. With a shared pool, queues with work can
// hold more than an even split of the slots for a while, so one request claims several jobs.
//
// Ownership: the pool's state (the free count, the waiting queues, and every queue's poolMember)
// is guarded by mu; the queue loops are the only callers (sync, leave), each for its own queue,
// and hold mu for a few operations on counters. A queue loop never waits for the pool: it reads
// how many slots it holds and claims within them; a grant to a waiting queue signals its loop
// (poolCh, 1-buffered).
//
// Accounting: a queue's held slots are what its loop may use: running handlers plus the slots
// its claims in flight reserved (use = running + reserved <= held at every sync). Each loop
// turn, the loop syncs with the pool, passing use and want (the slots a new claim could take
// now: its own free slots when a claimer is ready, else 0):
//   - held above use + want: the surplus goes back to the pool;
//   - slots held but unused (held > use) while other queues wait: given back too (a queue
//     never keeps idle slots that another queue waits for), and the queue joins the end of the
//     line for what it wants;
//   - held below use + want: with nobody waiting, the queue takes free slots at once; else it
//     waits in line (FIFO, each queue at most once).
// Then the pool grants free slots to the waiting queues in order, at most chunk slots per grant
// (max(1, Slots/8)); a queue still wanting more after its grant goes to the end of the line.
//
// Fairness between queues (the guarantee, in grants): a queue waiting for slots is granted
// some within at most W-1 grants to other queues, W the queues waiting at that moment
// (round-robin, each grant to one queue at the head of the line), and every grant is at most
// chunk slots, so between two grants to a queue each other waiting queue gets at most one. A
// busy queue cannot starve a quiet one: the slots its handlers free go to the head of the line,
// and it rejoins at the end (TestSlotPoolBusyQueueDoesNotStarveQuietOne).
// Invariant: free + the sum of every queue's held = Slots (checked by the tests, poolCheck).

// slotPool is the worker-wide slot pool.
type slotPool struct {
	mu      sync.Mutex
	slots   int
	free    int
	chunk   int      // the most slots one grant gives
	waiters []*queue // waiting queues, in order (each with pm.waiting set)
	// flush: armed while free slots wait to make up a whole grant (poolLinger).
	flush *time.Timer
	armed bool
}

// poolLinger bounds how long free slots wait to make up a whole grant for the queue at the
// head of the line before they are granted as they are.
const poolLinger = 2 * time.Millisecond

// poolMember is one queue's account with the pool (guarded by slotPool.mu).
type poolMember struct {
	held    int
	want    int // while waiting: the slots asked for
	waiting bool
	grants  int64 // grants received (tests)
}

func newSlotPool(slots int) *slotPool {
	p := &slotPool{slots: slots, free: slots, chunk: max(1, slots/8)}
	p.flush = time.AfterFunc(time.Hour, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.armed = false
		p.grant(nil, true)
	})
	p.flush.Stop()
	return p
}

// sync settles queue q's account (q's loop): use is the slots it uses now, want how many more
// a claim could take now, known what q held at its previous sync (the slots granted since are
// fresh: q keeps them for its next claim). It returns the slots q holds (at least use) and
// whether q waits in line for more.
func (p *slotPool) sync(q *queue, use, want, known int) (held int, waiting bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := &q.pm
	if m.held < use {
		// Cannot happen (the loop claims within what it holds): count it as held, so the
		// invariant keeps holding for the others.
		p.free -= use - m.held
		m.held = use
	}
	target := use + want
	others := len(p.waiters) > 0 && !(len(p.waiters) == 1 && m.waiting)
	switch {
	case m.held > target:
		p.free += m.held - target
		m.held = target
	case m.held > use+max(m.held-known, 0) && others:
		// Idle slots (not fresh) while other queues wait: back to the pool; q waits its turn.
		keep := use + max(m.held-known, 0)
		p.free += m.held - keep
		m.held = keep
	}
	if m.held < target && !m.waiting && len(p.waiters) == 0 {
		take := min(p.free, target-m.held)
		m.held += take
		p.free -= take
	}
	switch {
	case m.held < target:
		m.want = target - m.held
		if !m.waiting {
			m.waiting = true
			p.waiters = append(p.waiters, q)
		}
	case m.waiting:
		p.remove(q)
	}
	p.distribute(q)
	return m.held, m.waiting
}

// leave gives back everything q holds (q's loop, when it returns).
func (p *slotPool) leave(q *queue) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := &q.pm
	p.free += m.held
	m.held = 0
	if m.waiting {
		p.remove(q)
	}
	p.distribute(nil)
}

// remove takes q out of the line (mu held).
func (p *slotPool) remove(q *queue) {
	for i, w := range p.waiters {
		if w == q {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			break
		}
	}
	q.pm.waiting, q.pm.want = false, 0
}

// distribute grants free slots to the waiting queues (mu held): whole grants at once, and
// what is left, too few for the next queue's whole grant, after poolLinger (the flush timer).
func (p *slotPool) distribute(self *queue) {
	p.grant(self, false)
	if p.free > 0 && len(p.waiters) > 0 && !p.armed {
		p.armed = true
		p.flush.Reset(poolLinger)
	}
}

// grant grants free slots to the waiting queues in order, at most chunk each (mu held): while
// the head queue's grant would be whole (min(want, chunk)), or any grant when partial. A queue
// that still wants more goes to the end of the line. Every queue granted something is
// signalled, except self (the caller's own queue: its loop reads the result of sync).
//
// Why whole grants: slots come back one by one as handlers return; granted one at a time they
// would scatter over the waiting queues, one slot each, and every claim would take one job.
func (p *slotPool) grant(self *queue, partial bool) {
	for p.free > 0 && len(p.waiters) > 0 {
		w := p.waiters[0]
		m := &w.pm
		if !partial && p.free < min(m.want, p.chunk) {
			return
		}
		p.waiters = p.waiters[1:]
		g := min(p.free, m.want, p.chunk)
		m.held += g
		m.want -= g
		m.grants++
		p.free -= g
		if m.want > 0 {
			p.waiters = append(p.waiters, w)
		} else {
			m.waiting = false
		}
		if w != self {
			signal(w.poolCh)
		}
	}
}

// check returns free + the held slots of qs, and the pool's size (tests: they must be equal
// once every queue of the pool is in qs).
func (p *slotPool) check(qs []*queue) (sum, slots int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sum = p.free
	for _, q := range qs {
		sum += q.pm.held
	}
	return sum, p.slots
}
