package worker

import (
	"context"
	"encoding/json"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/logkey"
)

// RegistryTTLIntervals is how many registry intervals a worker's row outlives its last
// heartbeat: other workers delete rows older than that (the worker was killed).
const RegistryTTLIntervals = 6

// registryService keeps this worker's row in tenure.workers fresh: one upsert every
// RegistryEvery, which also deletes other workers' expired rows. Stop deletes the row
// (deregister), best effort.
func (w *Worker) registryService(ctx context.Context) {
	if w.cfg.RegistryEvery < 0 {
		return
	}
	t := time.NewTicker(w.cfg.RegistryEvery)
	defer t.Stop()
	for {
		if err := w.retryStale(func() error { return w.register(ctx) }); err != nil && ctx.Err() == nil {
			w.m.registryErrors.Add(1)
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
func (w *Worker) register(ctx context.Context) error {
	st := w.Stats()
	counters := map[string]int64{
		"claims": st.Claims, "claims_empty": st.EmptyClaims, "claimed": st.Claimed,
		"succeeded": st.Succeeded, "retried": st.Retried, "dead": st.Dead, "cancelled": st.Cancelled,
		"released": st.Released, "snoozed": st.Snoozed, "stale_rejected": st.StaleRejected, "finish_abandoned": st.FinishAbandoned,
		"heartbeats": st.Heartbeats, "lease_extensions": st.HeartbeatRows, "leases_lost": st.LeasesLost,
		"reclaimed": st.Reclaimed, "stuck": st.Stuck, "panics": st.Panics, "running": int64(st.Running),
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
	if !st.LastSuccess.IsZero() {
		last = &st.LastSuccess
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
	w.m.registryWrites.Add(1)
	if aged > 0 {
		w.log.Info("tenure: aged out expired worker registrations", "workers", aged)
	}
	return nil
}

// deregister deletes this worker's registry row when it stops gracefully, within ctx (or at
// most 2 s). A failure only leaves the row to age out.
func (w *Worker) deregister(ctx context.Context) {
	if w.cfg.RegistryEvery < 0 || w.skipDeregister || ctx.Err() != nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := gen.New(w.eng).DeregisterWorker(dctx, w.cfg.ID); err != nil {
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
