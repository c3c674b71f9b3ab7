package jobs

import (
	"context"
	"sort"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/db/migrations"
)

// BandStats are the numbers of one queue and priority band, on the database clock.
type BandStats struct {
	Queue    string
	Priority int

	Ready           int64 // due and waiting
	Scheduled       int64 // ready but run_at in the future
	Running         int64
	CancelRequested int64
	Dead            int64

	// OldestReadyAge is how long the oldest due job has waited (0 when none waits).
	OldestReadyAge time.Duration
	// ReadyAgeP50/P95 profile the ages of the jobs waiting now.
	ReadyAgeP50, ReadyAgeP95 time.Duration

	// Over the stats window: jobs finished, of which succeeded, and their queue wait
	// (run_at to claim of their last attempt) percentiles.
	Finished, Succeeded       int64
	WaitP50, WaitP95, WaitP99 time.Duration

	// Unserved counts the band's ready jobs (due or scheduled) that no live worker can run:
	// no live worker both serves the queue and registers the job's kind (Stats.Unserved says
	// which kinds and why). QueueServed reports whether any live worker serves the queue.
	Unserved    int64
	QueueServed bool
}

// UnservedJobs are the ready jobs of one queue and kind that no live worker can run: no worker
// whose registry row (tenure.workers) is live both serves Queue and registers Kind (the kinds it
// published in tenure.kinds). Such jobs wait forever until a worker that can run them starts.
// Workers with the registry off (worker.Config.RegistryEvery < 0) are not seen.
type UnservedJobs struct {
	Queue, Kind string
	Ready       int64
	// QueueServed: some live worker serves Queue. KindRegistered: some live worker registers
	// Kind. Either may be true alone (the queue is served by workers without the kind, or
	// the kind is registered by workers that do not serve the queue).
	QueueServed, KindRegistered bool
}

// DeadCodes counts dead jobs by queue, kind and last error code.
type DeadCodes struct {
	Queue, Kind, Code string
	Jobs              int64
}

// Stats is a snapshot for operators. Bands are sorted by queue, then priority (highest first).
type Stats struct {
	Window time.Duration
	Bands  []BandStats
	// TopDeadCodes are the most frequent error codes of dead jobs (at most 20 rows).
	TopDeadCodes []DeadCodes
	// Unserved lists the queues and kinds with ready jobs that no live worker can run, most
	// jobs first (at most MaxUnservedRows rows); empty when every ready job can be run.
	Unserved []UnservedJobs
	// DeleteOnSuccess lists the kinds that workers publish as deleting their succeeded jobs
	// (worker.HandlerOptions.DeleteOnSuccess, docs/guide.md §28), sorted, at most
	// MaxDeleteOnSuccessKinds: such a job's success leaves no row, so Finished and Succeeded
	// (read from the table) do not count it. The workers' own counters do.
	DeleteOnSuccess []string
}

// MaxDeleteOnSuccessKinds bounds Stats.DeleteOnSuccess and DeleteOnSuccessKinds.
const MaxDeleteOnSuccessKinds = 100

// maxUnservedGroups bounds the (queue, priority, kind) groups of unserved jobs Stats reads.
const maxUnservedGroups = 1000

// Stats returns per queue and priority counts, the oldest ready age and wait percentiles of the
// jobs finished within window (default 5 minutes). Starvation shows per band, never as a
// queue-wide average.
func (c *Client) Stats(ctx context.Context, window time.Duration) (*Stats, error) {
	if window <= 0 {
		window = 5 * time.Minute
	}
	live, err := c.q.LiveStats(ctx)
	if err != nil {
		return nil, err
	}
	waits, err := c.q.WaitStats(ctx, window.Microseconds())
	if err != nil {
		return nil, err
	}
	codes, err := c.q.DeadErrorCodes(ctx, 20)
	if err != nil {
		return nil, err
	}
	unserved, err := c.unservedRows(ctx)
	if err != nil {
		return nil, err
	}
	servedRows, err := c.ServedQueues(ctx)
	if err != nil {
		return nil, err
	}
	deleting, err := c.DeleteOnSuccessKinds(ctx)
	if err != nil {
		return nil, err
	}
	served := make(map[string]bool, len(servedRows))
	for _, q := range servedRows {
		served[q] = true
	}
	type key struct {
		q string
		p int16
	}
	idx := map[key]int{}
	s := &Stats{Window: window, DeleteOnSuccess: deleting}
	band := func(q string, p int16) *BandStats {
		k := key{q, p}
		if i, ok := idx[k]; ok {
			return &s.Bands[i]
		}
		idx[k] = len(s.Bands)
		s.Bands = append(s.Bands, BandStats{Queue: q, Priority: int(p)})
		return &s.Bands[len(s.Bands)-1]
	}
	for _, l := range live {
		b := band(l.Queue, l.Priority)
		b.Ready, b.Scheduled, b.Running, b.CancelRequested, b.Dead = l.Ready, l.Scheduled, l.Running, l.CancelRequested, l.Dead
		b.OldestReadyAge, b.ReadyAgeP50, b.ReadyAgeP95 = secs(l.OldestReadyAgeS), secs(l.ReadyAgeP50S), secs(l.ReadyAgeP95S)
	}
	for _, w := range waits {
		b := band(w.Queue, w.Priority)
		b.Finished, b.Succeeded = w.Finished, w.Succeeded
		b.WaitP50, b.WaitP95, b.WaitP99 = secs(w.WaitP50S), secs(w.WaitP95S), secs(w.WaitP99S)
	}
	for _, u := range unserved {
		band(u.Queue, u.Priority).Unserved += u.Ready
	}
	s.Unserved = groupUnserved(unserved)
	for i := range s.Bands {
		s.Bands[i].QueueServed = served[s.Bands[i].Queue]
	}
	sort.Slice(s.Bands, func(i, j int) bool {
		if s.Bands[i].Queue != s.Bands[j].Queue {
			return s.Bands[i].Queue < s.Bands[j].Queue
		}
		return s.Bands[i].Priority > s.Bands[j].Priority
	})
	for _, d := range codes {
		s.TopDeadCodes = append(s.TopDeadCodes, DeadCodes{Queue: d.Queue, Kind: d.Kind, Code: d.Code, Jobs: d.Jobs})
	}
	return s, nil
}

var _ = gen.WaitStatsRow{}

// Unserved returns the ready jobs (due or scheduled) that no live worker can run, per queue and
// kind, most jobs first (see UnservedJobs): the part of Stats that the dashboard and metrics
// read on their own.
func (c *Client) Unserved(ctx context.Context) ([]UnservedJobs, error) {
	rows, err := c.unservedRows(ctx)
	if err != nil {
		return nil, err
	}
	return groupUnserved(rows), nil
}

// DeleteOnSuccessKinds returns the kinds some worker published as deleting their succeeded
// jobs (tenure.kinds, migration 0024; docs/guide.md §28), sorted, at most
// MaxDeleteOnSuccessKinds. Counts of succeeded jobs read from the table (Stats, the CLI, the
// dashboard, tenureprom's cluster collector) show none of these kinds' successes. A kind
// stays listed while the row of a worker that published it remains (until a live worker
// publishing the kind prunes the rows of workers no longer live).
func (c *Client) DeleteOnSuccessKinds(ctx context.Context) ([]string, error) {
	kinds, err := c.q.DeleteOnSuccessKinds(ctx, MaxDeleteOnSuccessKinds)
	if err != nil {
		return nil, migrations.WrapNotMigrated(err)
	}
	return kinds, nil
}

// ServedQueues returns the queues some live worker serves (the worker registry's rows that
// have not expired), sorted.
func (c *Client) ServedQueues(ctx context.Context) ([]string, error) {
	qs, err := c.q.ServedQueues(ctx)
	if err != nil {
		return nil, migrations.WrapNotMigrated(err)
	}
	return qs, nil
}

func (c *Client) unservedRows(ctx context.Context) ([]*gen.UnservedJobsRow, error) {
	rows, err := c.q.UnservedJobs(ctx, maxUnservedGroups)
	if err != nil {
		return nil, migrations.WrapNotMigrated(err)
	}
	return rows, nil
}

// groupUnserved sums rows per queue and kind, most jobs first, then by queue and kind.
func groupUnserved(rows []*gen.UnservedJobsRow) []UnservedJobs {
	type key struct{ q, k string }
	idx := map[key]int{}
	var out []UnservedJobs
	for _, r := range rows {
		k := key{r.Queue, r.Kind}
		if i, ok := idx[k]; ok {
			out[i].Ready += r.Ready
			continue
		}
		idx[k] = len(out)
		out = append(out, UnservedJobs{Queue: r.Queue, Kind: r.Kind, Ready: r.Ready, QueueServed: r.QueueServed, KindRegistered: r.KindRegistered})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Ready != b.Ready {
			return a.Ready > b.Ready
		}
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		return a.Kind < b.Kind
	})
	return out
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
