package tenureui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui/internal/uidb"
)

// band is one queue × priority row of the overview.
type band struct {
	Queue    string
	Priority int
	Paused   bool
	// Unserved: no live worker serves the queue (the worker registry).
	Unserved bool

	Ready, Scheduled, Retrying, Running, LeaseExpired, CancelRequested, Dead int64
	OldestReadyAge                                                           time.Duration
	// Over Config.WaitWindow.
	Finished, Succeeded int64
	WaitP50, WaitP95    time.Duration
}

type workerView struct {
	jobs.WorkerInfo
	QueueNames []string
	Succeeded  int64
	// Rate is succeeded jobs per second between the last two registry heartbeats seen, or
	// since the worker started when only one was seen.
	Rate float64
}

type workerSample struct {
	at        time.Time
	succeeded int64
	rate      float64
}

type deadCode struct {
	Queue, Kind, Code string
	Jobs              int64
}

// snapshot is the overview's data, shared by every viewer for Config.RefreshEvery.
type snapshot struct {
	At      time.Time
	Took    time.Duration
	Bands   []band
	Queues  []jobs.QueueState
	Workers []workerView
	DeadTop []deadCode
	// NoWorker are the ready jobs no live worker can run, per queue and kind.
	NoWorker []jobs.UnservedJobs
	// DeleteOnSuccess are the kinds workers publish as deleting their succeeded jobs
	// (tenure.kinds): the bands' finished counts show none of their successes.
	DeleteOnSuccess []string
	Periodic        []jobs.PeriodicSchedule
	Chart           template.HTML
	// PerSecond is the completions per second over the chart's hour; LastMinute over the last
	// complete minute.
	PerSecond, LastMinute float64
	FinishedHour          int64
}

// overviewSnapshot returns the shared snapshot, computing it when older than RefreshEvery.
// Viewers arriving while it is computed wait for it rather than computing their own.
func (h *Handler) overviewSnapshot(ctx context.Context) (*snapshot, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.snap != nil && time.Since(h.snap.At) < h.cfg.RefreshEvery {
		return h.snap, nil
	}
	start := time.Now()
	s, err := h.computeSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	s.At, s.Took = time.Now(), time.Since(start)
	h.snap = s
	return s, nil
}

func (h *Handler) computeSnapshot(ctx context.Context) (*snapshot, error) {
	type key struct {
		q string
		p int16
	}
	idx := map[key]int{}
	s := &snapshot{}
	get := func(q string, p int16) *band {
		k := key{q, p}
		if i, ok := idx[k]; ok {
			return &s.Bands[i]
		}
		idx[k] = len(s.Bands)
		s.Bands = append(s.Bands, band{Queue: q, Priority: int(p)})
		return &s.Bands[len(s.Bands)-1]
	}
	ready, err := h.q.UIReadyBands(ctx)
	if err != nil {
		return nil, fmt.Errorf("ready bands: %w", err)
	}
	for _, r := range ready {
		b := get(r.Queue, r.Priority)
		b.Ready, b.Scheduled, b.Retrying = r.Ready, r.Scheduled, r.Retrying
		b.OldestReadyAge = secs(r.OldestReadyAgeS)
	}
	running, err := h.q.ClusterRunning(ctx)
	if err != nil {
		return nil, fmt.Errorf("running: %w", err)
	}
	for _, r := range running {
		b := get(r.Queue, r.Priority)
		b.Running += r.Running
		b.LeaseExpired += r.LeaseExpired
		b.CancelRequested += r.CancelRequested
	}
	dead, err := h.q.ClusterDead(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead: %w", err)
	}
	codes := map[[3]string]int64{}
	for _, r := range dead {
		get(r.Queue, r.Priority).Dead += r.Jobs
		codes[[3]string{r.Queue, r.Kind, r.Code}] += r.Jobs
	}
	for k, n := range codes {
		s.DeadTop = append(s.DeadTop, deadCode{Queue: k[0], Kind: k[1], Code: k[2], Jobs: n})
	}
	sort.Slice(s.DeadTop, func(i, j int) bool {
		a, b := s.DeadTop[i], s.DeadTop[j]
		if a.Jobs != b.Jobs {
			return a.Jobs > b.Jobs
		}
		return a.Queue+a.Kind+a.Code < b.Queue+b.Kind+b.Code
	})
	s.DeadTop = s.DeadTop[:min(len(s.DeadTop), 10)]
	waits, err := h.q.WaitStats(ctx, h.cfg.WaitWindow.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("wait stats: %w", err)
	}
	for _, r := range waits {
		b := get(r.Queue, r.Priority)
		b.Finished, b.Succeeded = r.Finished, r.Succeeded
		b.WaitP50, b.WaitP95 = secs(r.WaitP50S), secs(r.WaitP95S)
	}
	if s.Queues, err = h.client.ListQueues(ctx); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	paused := map[string]bool{}
	for _, q := range s.Queues {
		paused[q.Name] = q.Paused
	}
	served, err := h.client.ServedQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("served queues: %w", err)
	}
	for i := range s.Bands {
		s.Bands[i].Paused = paused[s.Bands[i].Queue]
		s.Bands[i].Unserved = !slices.Contains(served, s.Bands[i].Queue)
	}
	if s.NoWorker, err = h.client.Unserved(ctx); err != nil {
		return nil, fmt.Errorf("unserved jobs: %w", err)
	}
	s.NoWorker = s.NoWorker[:min(len(s.NoWorker), 20)]
	if s.DeleteOnSuccess, err = h.client.DeleteOnSuccessKinds(ctx); err != nil {
		return nil, fmt.Errorf("delete-on-success kinds: %w", err)
	}
	sort.Slice(s.Bands, func(i, j int) bool {
		if s.Bands[i].Queue != s.Bands[j].Queue {
			return s.Bands[i].Queue < s.Bands[j].Queue
		}
		return s.Bands[i].Priority > s.Bands[j].Priority
	})
	ws, err := h.client.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	seen := map[string]bool{}
	for _, w := range ws {
		v := workerView{WorkerInfo: w, Succeeded: w.Counters["succeeded"]}
		for q := range w.Queues {
			v.QueueNames = append(v.QueueNames, q)
		}
		slices.Sort(v.QueueNames)
		prev, ok := h.prevWorkers[w.ID]
		switch {
		case ok && w.HeartbeatAt.After(prev.at):
			v.Rate = float64(v.Succeeded-prev.succeeded) / w.HeartbeatAt.Sub(prev.at).Seconds()
		case ok:
			v.Rate = prev.rate
		default:
			if up := w.HeartbeatAt.Sub(w.StartedAt).Seconds(); up > 0 {
				v.Rate = float64(v.Succeeded) / up
			}
		}
		v.Rate = max(v.Rate, 0)
		h.prevWorkers[w.ID] = workerSample{at: w.HeartbeatAt, succeeded: v.Succeeded, rate: v.Rate}
		seen[w.ID] = true
		s.Workers = append(s.Workers, v)
	}
	for id := range h.prevWorkers {
		if !seen[id] {
			delete(h.prevWorkers, id)
		}
	}
	if s.Periodic, err = h.client.Periodic(ctx); err != nil {
		return nil, fmt.Errorf("periodic: %w", err)
	}
	now, err := h.q.DatabaseNow(ctx)
	if err != nil {
		return nil, err
	}
	now = now.Truncate(time.Minute)
	since := now.Add(-time.Hour)
	comp, err := h.q.UICompletions(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("completions: %w", err)
	}
	s.Chart, s.PerSecond, s.LastMinute, s.FinishedHour = completionChart(comp, since, now)
	return s, nil
}

// completionChart renders completions per second per minute of the last hour as an inline SVG
// (numbers only: no job data reaches it).
func completionChart(rows []uidb.UICompletionsRow, since, now time.Time) (template.HTML, float64, float64, int64) {
	const bars, w, hgt = 61, 600.0, 120.0
	var fin, ok [bars]int64
	var total int64
	for _, r := range rows {
		i := int((r.Minute - since.Unix()) / 60)
		if i < 0 || i >= bars {
			continue
		}
		fin[i], ok[i] = r.Finished, r.Succeeded
		total += r.Finished
	}
	var peak int64 = 1
	for _, n := range fin {
		peak = max(peak, n)
	}
	bw := w / bars
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="completions per second, last hour">`, w, hgt+16, w, hgt+16)
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%.1f" x2="%.0f" y2="%.1f"/>`, hgt, w, hgt)
	for i := range bars {
		if fin[i] == 0 {
			continue
		}
		x := float64(i) * bw
		hf := hgt * float64(fin[i]) / float64(peak)
		hs := hgt * float64(ok[i]) / float64(peak)
		t := since.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")
		fmt.Fprintf(&b, `<g><title>%s UTC: %.2f/s finished, %.2f/s succeeded</title>`, t, float64(fin[i])/60, float64(ok[i])/60)
		fmt.Fprintf(&b, `<rect class="bar-fail" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x, hgt-hf, bw-1, hf-hs)
		fmt.Fprintf(&b, `<rect class="bar-ok" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></g>`, x, hgt-hs, bw-1, hs)
	}
	fmt.Fprintf(&b, `<text class="lbl" x="0" y="%.0f">-60 min</text><text class="lbl" x="%.0f" y="%.0f" text-anchor="end">now</text>`, hgt+13, w, hgt+13)
	fmt.Fprintf(&b, `<text class="lbl" x="4" y="12">peak %.2f/s</text></svg>`, float64(peak)/60)
	last := float64(fin[bars-2]) / 60
	return template.HTML(b.String()), float64(total) / now.Sub(since).Seconds(), last, total
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// listQuery is the jobs list's filter and page position.
type listQuery struct {
	State, Queue, Kind, Search, Tag string
	Priority                        int
	From, To                        time.Time
	// Before: list ids below it (0: from the newest).
	Before int64
}

const timeInput = "2006-01-02T15:04"

func parseListQuery(get func(string) string) (listQuery, error) {
	q := listQuery{State: get("state"), Queue: strings.TrimSpace(get("queue")), Kind: strings.TrimSpace(get("kind")), Search: get("q"),
		Tag: strings.TrimSpace(get("tag"))}
	if q.Tag != "" && !jobs.ValidTag(q.Tag) {
		tag := q.Tag
		q.Tag = ""
		return q, fmt.Errorf("tag %q is not a valid tag", clip(tag, 128))
	}
	if q.State != "" && !generics.JobState(q.State).Valid() {
		st := q.State
		q.State = ""
		return q, fmt.Errorf("unknown state %q", clip(st, 64))
	}
	if len(q.Search) > 200 {
		q.Search = ""
		return q, fmt.Errorf("search text is longer than 200 bytes")
	}
	// Queue and kind names are at most 128 characters (the schema's domains).
	if utf8.RuneCountInString(q.Queue) > 128 || utf8.RuneCountInString(q.Kind) > 128 {
		q.Queue, q.Kind = "", ""
		return q, fmt.Errorf("a queue or kind name is at most 128 characters")
	}
	if p := get("priority"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > jobs.PriorityMax {
			return q, fmt.Errorf("priority %q is not a number within 1..%d", p, jobs.PriorityMax)
		}
		q.Priority = n
	}
	for _, f := range []struct {
		name string
		t    *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if v := get(f.name); v != "" {
			t, err := time.Parse(timeInput, v)
			if err != nil {
				if t, err = time.Parse(time.RFC3339, v); err != nil {
					return q, fmt.Errorf("%s %q is not a time (YYYY-MM-DDTHH:MM, UTC)", f.name, v)
				}
			}
			*f.t = t.UTC()
		}
	}
	if b := get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			return q, fmt.Errorf("before %q is not a job id", b)
		}
		q.Before = n
	}
	return q, nil
}

// values encodes q (without Before) as URL query parameters.
func (q listQuery) values() map[string]string {
	m := map[string]string{"state": q.State, "queue": q.Queue, "kind": q.Kind, "q": q.Search, "tag": q.Tag}
	if q.Priority != 0 {
		m["priority"] = strconv.Itoa(q.Priority)
	}
	if !q.From.IsZero() {
		m["from"] = q.From.Format(timeInput)
	}
	if !q.To.IsZero() {
		m["to"] = q.To.Format(timeInput)
	}
	return m
}

type listResult struct {
	// Jobs are the listed jobs' bounded columns (an args preview, never the args).
	Jobs []uidb.UIListWindowRow
	// Next is the Before of the next (older) page; 0 when there is none.
	Next int64
	// Partial: the page is not full because the scan bound was reached; older ids, from
	// Next down, were not searched yet.
	Partial bool
	// ScannedFrom..ScannedTo is the id range the windows read (window mode only).
	ScannedFrom, ScannedTo int64
	Statement              string
}

type filterArgs struct {
	queue, kind, search, tag *string
	priority                 *int16
	from, to                 *time.Time
}

func (q listQuery) args() filterArgs {
	var a filterArgs
	a.queue, a.kind, a.search, a.tag = nonEmpty(q.Queue), nonEmpty(q.Kind), nonEmpty(q.Search), nonEmpty(q.Tag)
	if q.Priority != 0 {
		p := int16(q.Priority)
		a.priority = &p
	}
	if !q.From.IsZero() {
		a.from = &q.From
	}
	if !q.To.IsZero() {
		a.to = &q.To
	}
	return a
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// list runs the list statement for q, in a read transaction bounded by QueryTimeout: ready,
// running and dead jobs through their partial index, anything else through bounded
// primary-key windows.
func (h *Handler) list(ctx context.Context, q listQuery, limit int) (*listResult, error) {
	var res *listResult
	err := h.read(ctx, func(gq *uidb.Queries) error {
		var err error
		res, err = h.listIn(ctx, gq, q, limit)
		return err
	})
	return res, err
}

// conv converts the rows of a list statement: the four return the same columns.
func conv[T ~struct {
	ID                int64
	State             uidb.TenureJobState
	Queue             string
	Kind              string
	Priority          int16
	Attempts          int32
	MaxAttempts       int32
	Generation        int64
	LastErrorCode     *string
	RunAt             time.Time
	CreatedAt         time.Time
	CancelRequestedAt *time.Time
	ArgsPreview       string
	ArgsStored        int32
}](rows []T, err error) ([]uidb.UIListWindowRow, error) {
	out := make([]uidb.UIListWindowRow, len(rows))
	for i, r := range rows {
		out[i] = uidb.UIListWindowRow(r)
	}
	return out, err
}

func (h *Handler) listIn(ctx context.Context, gq *uidb.Queries, q listQuery, limit int) (*listResult, error) {
	a := q.args()
	before := q.Before
	if before == 0 {
		before = math.MaxInt64
	}
	res := &listResult{}
	var err error
	switch generics.JobState(q.State) {
	case generics.JobStateReady:
		res.Statement = "UIListReady"
		res.Jobs, err = conv(gq.UIListReady(ctx, uidb.UIListReadyParams{BeforeID: before, Queue: a.queue, Kind: a.kind,
			Priority: a.priority, CreatedFrom: a.from, CreatedTo: a.to, Search: a.search, Tag: a.tag, MaxRows: int32(limit),
			PreviewMaxStored: ListPreviewMaxStored, PreviewChars: ListPreviewChars, SearchMaxStored: SearchMaxStored, SearchChars: SearchChars}))
	case generics.JobStateRunning:
		res.Statement = "UIListRunning"
		res.Jobs, err = conv(gq.UIListRunning(ctx, uidb.UIListRunningParams{BeforeID: before, Queue: a.queue, Kind: a.kind,
			Priority: a.priority, CreatedFrom: a.from, CreatedTo: a.to, Search: a.search, Tag: a.tag, MaxRows: int32(limit),
			PreviewMaxStored: ListPreviewMaxStored, PreviewChars: ListPreviewChars, SearchMaxStored: SearchMaxStored, SearchChars: SearchChars}))
	case generics.JobStateDead:
		res.Statement = "UIListDead"
		res.Jobs, err = conv(gq.UIListDead(ctx, uidb.UIListDeadParams{BeforeID: before, Queue: a.queue, Kind: a.kind,
			Priority: a.priority, CreatedFrom: a.from, CreatedTo: a.to, Search: a.search, Tag: a.tag, MaxRows: int32(limit),
			PreviewMaxStored: ListPreviewMaxStored, PreviewChars: ListPreviewChars, SearchMaxStored: SearchMaxStored, SearchChars: SearchChars}))
	default:
		return h.listWindows(ctx, gq, q, a, before, limit)
	}
	if err != nil {
		return nil, err
	}
	if len(res.Jobs) == limit {
		res.Next = res.Jobs[len(res.Jobs)-1].ID
	}
	return res, nil
}

func (h *Handler) listWindows(ctx context.Context, gq *uidb.Queries, q listQuery, a filterArgs, before int64, limit int) (*listResult, error) {
	res := &listResult{Statement: "UIListWindow"}
	b, err := gq.UIJobIDBounds(ctx)
	if err != nil {
		return nil, err
	}
	if b.MaxID == 0 {
		return res, nil
	}
	before = min(before, b.MaxID+1)
	res.ScannedTo = before - 1
	state := uidb.NullTenureJobState{}
	if q.State != "" {
		state = uidb.NullTenureJobState{TenureJobState: uidb.TenureJobState(q.State), Valid: true}
	}
	for range h.cfg.ScanWindows {
		if before <= b.MinID {
			break
		}
		floor := max(before-int64(h.cfg.ScanWindow), b.MinID)
		rows, err := gq.UIListWindow(ctx, uidb.UIListWindowParams{BeforeID: before, FloorID: floor, State: state,
			Queue: a.queue, Kind: a.kind, Priority: a.priority, CreatedFrom: a.from, CreatedTo: a.to, Search: a.search,
			Tag: a.tag, MaxRows: int32(limit - len(res.Jobs)), PreviewMaxStored: ListPreviewMaxStored,
			PreviewChars: ListPreviewChars, SearchMaxStored: SearchMaxStored, SearchChars: SearchChars})
		if err != nil {
			return nil, err
		}
		res.Jobs = append(res.Jobs, rows...)
		if len(res.Jobs) == limit {
			res.Next = res.Jobs[len(res.Jobs)-1].ID
			res.ScannedFrom = res.Next
			return res, nil
		}
		before = floor
	}
	res.ScannedFrom = before
	if before > b.MinID {
		res.Next, res.Partial = before, true
	}
	return res, nil
}

// read runs f's statements in a read-only transaction whose statements are each bounded by
// Config.QueryTimeout.
func (h *Handler) read(ctx context.Context, f func(*uidb.Queries) error) error {
	tx, err := h.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := uidb.New(h.sch.Wrap(tx)) // not h.q.WithTx(tx): that would bypass the schema's rewriting
	if err := q.UIStatementTimeout(ctx, h.cfg.QueryTimeout.Milliseconds()); err != nil {
		return err
	}
	if err := f(q); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// timedOut reports whether err is a statement that ran over its statement timeout.
func timedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014" // query_canceled: statement_timeout
}
