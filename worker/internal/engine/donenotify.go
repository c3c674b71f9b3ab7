package engine

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// The done signal after the commit. jobs.Client.Wait wakes on the done channel: the ids of jobs
// that reached a final state. The engine's finishes (CompleteMany, FailMany, ReleaseMany,
// SnoozeMany, on the finishers and riding on claims) do not NOTIFY in their own transaction:
// PostgreSQL serialises every committing transaction that notified behind one lock on the
// notification queue, taken before the commit and held until the commit record is flushed, so
// writing transactions that notify cannot share a WAL flush (group commit) and a fleet's
// finishes and claims queue behind each other's fsyncs (measured: docs/design.md). The
// finishers and the queue loops hand each landed final transition to a DoneNotifier, which
// sends them in an autocommitted statement of its own that writes nothing (NotifyDoneMany): its
// commit needs no flush, so it holds that lock only for the moment of its commit.
//
// What it gives up: the signal follows the commit by one statement instead of coming with it,
// and a process that dies between the two never sends it; a waiter then finds the job on its
// fallback poll (jobs.Config.WaitPoll), as after a lost notification.
//
// The release's signals go the same way (migration 0029): the finish statements set
// tenure.signals, so the settle of dependents in their trigger (tenure.settle_jobs) releases
// and cancels without notifying, and return settles for rows with dependents (DoneID.Settles).
// The send passes those ids to NotifyDoneSettled, which reads what their dependents are after the
// commit and sends the new-job wake-up of those ready and due and the done signal of those
// cancelled (a cascade followed). Lost with the process, as above: a released task then waits
// for a worker's poll (FetchPollMax).

// DoneEntriesPerPayload is how many entries one notification carries (an id is at most 20
// digits: 350 of them stay under PostgreSQL's 8,000-byte payload limit).
const DoneEntriesPerPayload = 350

// DoneID is a job's entry in the done signal: its id, written s<id> when its finish deleted
// the row (delete on success). Entries stay ids until a payload is written (DonePayloads), so
// a finish costs the signal no allocation per job. Settles marks a job with dependents (the
// finish statement's settles column): its finish settled them (released or cancelled the
// dependents whose last edge it resolved) without sending their signals in its transaction
// (tenure.settle_jobs, migration 0029), so the send reads what they became and signals them
// (NotifyDoneSettled, DoneSettled).
type DoneID struct {
	ID      int64
	Deleted bool
	Settles bool
}

// DoneNotifier collects done entries and sends them after the commits that made them true.
// Add never blocks on the database; Run is the one goroutine that sends.
type DoneNotifier struct {
	mu      sync.Mutex
	pending []DoneID
	wake    chan struct{}
}

// NewDoneNotifier returns an idle notifier.
func NewDoneNotifier() *DoneNotifier {
	return &DoneNotifier{wake: make(chan struct{}, 1)}
}

// Add queues entries whose finishes have committed. Callers add before they report the finish
// as settled, so that everything added is in the notifier before the worker's loops end and
// Run's last send.
func (n *DoneNotifier) Add(entries []DoneID) {
	if n == nil || len(entries) == 0 { // nil: an engine built without New (white-box tests)
		return
	}
	n.mu.Lock()
	n.pending = append(n.pending, entries...)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// take returns the entries pending.
func (n *DoneNotifier) take() []DoneID {
	n.mu.Lock()
	entries := n.pending
	n.pending = nil
	n.mu.Unlock()
	return entries
}

// DonePayloads writes entries as payloads of at most DoneEntriesPerPayload comma-separated
// entries each (an id, or s<id>).
func DonePayloads(entries []DoneID) []string {
	var out []string
	var b []byte
	for len(entries) > 0 {
		k := min(len(entries), DoneEntriesPerPayload)
		b = b[:0]
		for i, e := range entries[:k] {
			if i > 0 {
				b = append(b, ',')
			}
			if e.Deleted {
				b = append(b, 's')
			}
			b = strconv.AppendInt(b, e.ID, 10)
		}
		out = append(out, string(b))
		entries = entries[k:]
	}
	return out
}

// DoneSettled returns the ids of the entries that Settle (nil when none).
func DoneSettled(entries []DoneID) []int64 {
	var out []int64
	for _, e := range entries {
		if e.Settles {
			out = append(out, e.ID)
		}
	}
	return out
}

// DoneSendGap is the least time between two sends of the done signal: a send that comes due
// sooner waits for it, and carries what arrives meanwhile. Each send is a statement and a commit
// of its own; at 10,000 jobs/s a send per finish batch was ~40 statements per 1,000 jobs and cost
// a single worker's burn-down ~15 % (BenchmarkFleetBurnDown). An idle queue's waiter pays
// nothing (its send is the first in DoneSendGap); under load a waiter pays at most DoneSendGap.
const DoneSendGap = 5 * time.Millisecond

// Run sends what is added until ctx ends, then sends what is left once more under a context of
// its own bounded by last. send runs one statement for the entries (DonePayloads); a failed send
// is reported to failed and dropped (the waiters' poll covers it): retrying a notification could
// only delay the others. Sends are at least DoneSendGap apart; entries added while a send runs
// or waits go out with it or in the next one, so under load one statement carries the entries of
// many finishes.
func (n *DoneNotifier) Run(ctx context.Context, last time.Duration, send func(context.Context, []DoneID) error, failed func(error)) {
	var lastSend time.Time
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-n.wake:
			if wait := DoneSendGap - time.Since(lastSend); wait > 0 {
				gap.Reset(wait)
				select {
				case <-gap.C:
				case <-ctx.Done():
					n.flush(ctx, last, send, failed)
					return
				}
			}
			if p := n.take(); len(p) > 0 {
				lastSend = time.Now()
				if err := send(ctx, p); err != nil && ctx.Err() == nil {
					failed(err)
				}
			}
		case <-ctx.Done():
			n.flush(ctx, last, send, failed)
			return
		}
	}
}

// flush sends what is left when the engine stops, bounded by last.
func (n *DoneNotifier) flush(ctx context.Context, last time.Duration, send func(context.Context, []DoneID) error, failed func(error)) {
	p := n.take()
	if len(p) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), last)
	defer cancel()
	if err := send(lctx, p); err != nil {
		failed(err)
	}
}
