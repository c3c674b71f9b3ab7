package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
	"github.com/tenureq/tenure/jobs"
)

// RegistryTTLIntervals is worker.RegistryTTLIntervals: how many registry intervals a worker's
// row outlives its last heartbeat (a test checks the two are equal).
const RegistryTTLIntervals = 6

// registryService keeps this worker's row in tenure.workers fresh: one upsert every
// RegistryEvery, which also deletes other workers' expired rows. Stop deletes the row
// (deregister), best effort.
func (w *Engine) registryService(ctx context.Context) {
	if w.cfg.RegistryEvery < 0 {
		// No registry row, but tenure.enqueue still gets this worker's kind defaults.
		pctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
		defer cancel()
		if err := w.publishKinds(pctx); err != nil && ctx.Err() == nil {
			w.m.RegistryErrors.Add(1)
			w.engineError(&w.registryLog, "publishing kind defaults", err)
		}
		return
	}
	t := time.NewTicker(w.cfg.RegistryEvery)
	defer t.Stop()
	for {
		if err := w.retryStale(func() error { return w.register(ctx) }); err != nil && ctx.Err() == nil {
			w.m.RegistryErrors.Add(1)
			w.engineError(&w.registryLog, "worker registry heartbeat", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// register writes one registry heartbeat and returns the number of expired rows it deleted.
func (w *Engine) register(ctx context.Context) error {
	m := w.m
	counters := map[string]int64{
		"claims": m.Claims.Load(), "claims_empty": m.EmptyClaims.Load(), "claimed": m.Claimed.Load(),
		"succeeded": m.Succeeded.Load(), "retried": m.Retried.Load(), "dead": m.Dead.Load(), "cancelled": m.Cancelled.Load(),
		"released": m.Released.Load(), "snoozed": m.Snoozed.Load(), "stale_rejected": m.StaleRejected.Load(), "finish_abandoned": m.FinishAbandoned.Load(),
		"heartbeats": m.Heartbeats.Load(), "lease_extensions": m.HeartbeatRows.Load(), "leases_lost": m.LeasesLost.Load(),
		"reclaimed": m.Reclaimed.Load(), "stuck": m.Stuck.Load(), "panics": m.Panics.Load(), "running": m.Owned.Load(),
	}
	cj, err := json.Marshal(counters)
	if err != nil {
		return err
	}
	qs := map[string]map[string]any{}
	for name, q := range w.cfg.Queues {
		qs[name] = map[string]any{"concurrency": q.Concurrency}
		if w.queues[name].pausedFlag.Load() {
			qs[name]["paused"] = true
		}
	}
	qj, err := json.Marshal(qs)
	if err != nil {
		return err
	}
	var last *time.Time
	if ns := m.LastSuccess.Load(); ns != 0 {
		t := time.Unix(0, ns)
		last = &t
	}
	host, _ := os.Hostname()
	rctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	aged, err := w.q.RegisterWorker(rctx, gen.RegisterWorkerParams{
		ID: w.cfg.ID, Host: truncate(host, 255), Pid: int32(os.Getpid()), Version: moduleVersion(),
		Queues: qj, StartedAt: w.started, TtlMs: (RegistryTTLIntervals * w.cfg.RegistryEvery).Milliseconds(),
		LastSuccessAt: last, Counters: cj,
	})
	if err != nil {
		return err
	}
	if err := w.publishKinds(rctx); err != nil {
		return err
	}
	w.m.RegistryWrites.Add(1)
	if aged > 0 {
		w.log.Info("tenure: aged out expired worker registrations", "workers", aged)
	}
	return nil
}

// publishKinds writes the defaults of this worker's kinds into tenure.kinds (migration 0018),
// where tenure.enqueue applies them and Stats reads which kinds a live worker registers, and
// which kinds delete their succeeded jobs (migration 0024). Rows that did not change are not
// rewritten.
func (w *Engine) publishKinds(ctx context.Context) error {
	kinds := slices.Sorted(maps.Keys(w.handlers))
	if len(kinds) == 0 {
		return nil
	}
	p := gen.PublishKindsParams{WorkerID: w.cfg.ID}
	for _, k := range kinds {
		o := w.handlers[k].opts
		p.Kinds = append(p.Kinds, k)
		p.Queues = append(p.Queues, cmp.Or(o.Queue, jobs.DefaultQueue))
		p.Priorities = append(p.Priorities, int16(cmp.Or(o.Priority, jobs.DefaultPriority)))
		p.MaxAttempts = append(p.MaxAttempts, int32(cmp.Or(o.MaxAttempts, jobs.DefaultMaxAttempts)))
		p.LeaseMs = append(p.LeaseMs, int32(cmp.Or(o.Lease, jobs.DefaultLease).Milliseconds()))
		p.TimeoutMs = append(p.TimeoutMs, o.Timeout.Milliseconds())
		p.DeleteOnSuccess = append(p.DeleteOnSuccess, o.DeleteOnSuccess)
	}
	if err := w.q.PublishKinds(ctx, p); err != nil {
		return fmt.Errorf("publishing kind defaults: %w", err)
	}
	return nil
}

// deregister deletes this worker's registry row when it stops gracefully, within ctx (or at
// most 2 s). A failure only leaves the row to age out.
func (w *Engine) deregister(ctx context.Context) {
	if w.cfg.RegistryEvery < 0 || w.skipDeregister || ctx.Err() != nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := w.qon(w.eng).DeregisterWorker(dctx, w.cfg.ID); err != nil {
		w.log.Warn("tenure: worker deregistration failed; the row will age out", logkey.Err, err)
	}
}

var moduleVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	const mod = "github.com/tenureq/tenure"
	if bi.Main.Path == mod {
		return truncate(bi.Main.Version, 100)
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			if d.Replace != nil && d.Replace.Version != "" {
				return truncate(d.Replace.Version, 100)
			}
			return truncate(d.Version, 100)
		}
	}
	return "(unknown)"
})

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
