package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/bench/internal/claimtrace"
	"github.com/tenureq/tenure/bench/internal/sut"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// Sample is one soak sampling interval.
type Sample struct {
	T           float64            `json:"t_s"` // seconds since the soak started (end of the interval)
	OfferedPerS float64            `json:"offered_per_s"`
	InsertedPS  float64            `json:"inserted_per_s"`
	CompletedPS float64            `json:"completed_per_s"`
	Claim       claimtrace.Summary `json:"claim"`
	Ready       int64              `json:"ready"`
	Sizes       Sizes              `json:"sizes"`
	Load        string             `json:"loadavg"`
}

// Slope is a metric's least-squares trend over a window of the soak.
type Slope struct {
	Metric    string  `json:"metric"`
	Unit      string  `json:"unit"`
	Window    string  `json:"window"`
	From      float64 `json:"from_s"`
	To        float64 `json:"to_s"`
	PerTenMin float64 `json:"per_10min"`
	Mean      float64 `json:"mean"`
	// RelPerTenMin is PerTenMin / Mean (0 when the mean is 0).
	RelPerTenMin float64 `json:"rel_per_10min"`
	First        float64 `json:"first_fifth_mean"`
	Last         float64 `json:"last_fifth_mean"`
}

// Soak is the steady run's result.
type Soak struct {
	// CapacityPerS is measured on a table holding RetainedRows finished rows (the soak's
	// steady state at the offered share of CapacityFreshPerS, measured on a fresh table).
	CapacityPerS      float64            `json:"capacity_per_s"`
	CapacityFreshPerS float64            `json:"capacity_fresh_per_s"`
	RetainedRows      int                `json:"capacity_retained_rows"`
	CapacityLoad      string             `json:"capacity_loadavg"`
	CapacityClaim     claimtrace.Summary `json:"capacity_claim"`
	Load              float64            `json:"load_share"`
	OfferedPerS       float64            `json:"offered_per_s"`
	Slots             int                `json:"slots"`
	DurationS         float64            `json:"duration_s"`
	RetentionS        float64            `json:"finished_retention_s"`
	SampleEveryS      float64            `json:"sample_every_s"`
	Inserted          int64              `json:"inserted"`
	Succeeded         int64              `json:"succeeded"`
	Pruned            int64              `json:"pruned"`
	Claim             claimtrace.Summary `json:"claim_total"`
	Samples           []Sample           `json:"samples"`
	Slopes            []Slope            `json:"slopes"`
	StartedAt         time.Time          `json:"started_at"`
	Error             string             `json:"error,omitempty"`
}

// linfit returns the least-squares slope and the mean of ys against xs.
func linfit(xs, ys []float64) (slope, mean float64) {
	n := float64(len(xs))
	if len(xs) == 0 || len(xs) != len(ys) {
		return 0, 0
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, my
	}
	return sxy / sxx, my
}

// soakMetrics are the series whose trends the soak reports.
func soakMetrics(samples []Sample) (names []string, units map[string]string, get map[string]func(Sample) float64) {
	units = map[string]string{}
	get = map[string]func(Sample) float64{}
	add := func(name, unit string, f func(Sample) float64) {
		names = append(names, name)
		units[name], get[name] = unit, f
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	add("claim p99", "ms", func(s Sample) float64 { return s.Claim.P99Ms })
	add("claim p50", "ms", func(s Sample) float64 { return s.Claim.P50Ms })
	add("completed", "jobs/s", func(s Sample) float64 { return s.CompletedPS })
	add("ready backlog", "jobs", func(s Sample) float64 { return float64(s.Ready) })
	add("dead tuples", "rows", func(s Sample) float64 { return float64(s.Sizes.Dead) })
	add("live tuples", "rows", func(s Sample) float64 { return float64(s.Sizes.Live) })
	add("table (heap)", "MB", func(s Sample) float64 { return mb(s.Sizes.TableBytes) })
	add("table + indexes", "MB", func(s Sample) float64 { return mb(s.Sizes.TotalBytes) })
	idx := map[string]bool{}
	for _, s := range samples {
		for n := range s.Sizes.Indexes {
			idx[n] = true
		}
	}
	var in []string
	for n := range idx {
		in = append(in, n)
	}
	sort.Strings(in)
	for _, n := range in {
		add(n, "MB", func(s Sample) float64 { return mb(s.Sizes.Indexes[n]) })
	}
	return names, units, get
}

// slopes computes each metric's trend over the whole soak and over its second half.
func slopes(samples []Sample) []Slope {
	if len(samples) < 2 {
		return nil
	}
	names, units, get := soakMetrics(samples)
	end := samples[len(samples)-1].T
	var out []Slope
	for _, w := range []struct {
		name string
		from float64
	}{{"whole run", 0}, {"second half", end / 2}} {
		var sel []Sample
		for _, s := range samples {
			if s.T >= w.from {
				sel = append(sel, s)
			}
		}
		if len(sel) < 2 {
			continue
		}
		for _, n := range names {
			xs, ys := make([]float64, len(sel)), make([]float64, len(sel))
			for i, s := range sel {
				xs[i], ys[i] = s.T, get[n](s)
			}
			k, mean := linfit(xs, ys)
			sl := Slope{Metric: n, Unit: units[n], Window: w.name, From: sel[0].T, To: sel[len(sel)-1].T,
				PerTenMin: k * 600, Mean: mean}
			if mean != 0 {
				sl.RelPerTenMin = sl.PerTenMin / mean
			}
			fifth := max(1, len(ys)/5)
			sl.First = meanOf(ys[:fifth])
			sl.Last = meanOf(ys[len(ys)-fifth:])
			out = append(out, sl)
		}
	}
	return out
}

func meanOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// producer inserts jobs with jobs.Client.InsertMany, either as fast as a backlog cap allows
// (rate 0) or at a fixed offered rate.
type producer struct {
	client   *jobs.Client
	pad      string
	inserted atomic.Int64
	errors   atomic.Int64
	seq      atomic.Int64
}

func (p *producer) batch(ctx context.Context, n int) error {
	params := make([]jobs.InsertManyParams, n)
	opts := &jobs.InsertOpts{Queue: "default"}
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: sut.BenchArgs{Pad: p.pad, Seq: p.seq.Add(1)}, Opts: opts}
	}
	if _, err := p.client.InsertMany(ctx, params); err != nil {
		if ctx.Err() == nil { // not the producers being stopped
			p.errors.Add(1)
		}
		return err
	}
	p.inserted.Add(int64(n))
	return nil
}

// runSaturated keeps at most backlogCap jobs inserted but not yet succeeded, with two
// producers inserting batches of 100, until ctx ends.
func (p *producer) runSaturated(ctx context.Context, w *worker.Worker, backlogCap int64) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if p.inserted.Load()-w.Stats().Succeeded >= backlogCap {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				_ = p.batch(ctx, 100)
			}
		}()
	}
	wg.Wait()
}

// runRate offers rate jobs/s from two producers until ctx ends: every 10 ms each inserts
// what its schedule is owed (at most 500 per statement).
func (p *producer) runRate(ctx context.Context, rate float64) {
	var wg sync.WaitGroup
	start := time.Now()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine int64
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				owed := int64(rate/2*time.Since(start).Seconds()) - mine
				for owed > 0 && ctx.Err() == nil {
					n := min(owed, 500)
					if p.batch(ctx, int(n)) != nil {
						break
					}
					mine += n
					owed -= n
				}
			}
		}()
	}
	wg.Wait()
}

// measureCapacity runs the standard worker saturated (producers keep 20 jobs per slot
// inserted ahead) and returns the completed jobs/s after a warm-up. It is the capacity of the
// same workload the soak offers (inserts and claims on one machine). With retained > 0 the
// database first holds that many succeeded rows finished evenly over the soak's retention,
// and the worker prunes with that retention, as in the soak's steady state (the table a soak
// at that rate settles at); otherwise the table is fresh.
func measureCapacity(ctx context.Context, c *config, adminURL string, logf func(string, ...any), retained int) (float64, claimtrace.Summary, string, error) {
	name := fmt.Sprintf("tscale_%d_capacity", pid())
	if retained > 0 {
		name += "_retained"
	}
	e, err := newEnv(ctx, c, adminURL, name, logf)
	if err != nil {
		return 0, claimtrace.Summary{}, "", err
	}
	defer e.drop()
	var configure func(*worker.Config)
	if retained > 0 {
		if err := e.preload(ctx, shape{Finished: retained, FinishedSpan: c.soakRetain}, []string{"default"}); err != nil {
			return 0, claimtrace.Summary{}, "", err
		}
		configure = func(wc *worker.Config) { wc.FinishedRetention = c.soakRetain }
	}
	r, err := newRig(ctx, c, e.url, []string{"default"}, c.slots, false, configure)
	if err != nil {
		return 0, claimtrace.Summary{}, "", err
	}
	defer r.close()
	client, err := jobs.NewClient(r.app, &jobs.Config{})
	if err != nil {
		return 0, claimtrace.Summary{}, "", err
	}
	p := &producer{client: client, pad: sut.Pad(c.payload)}
	if err := r.w.Start(ctx); err != nil {
		return 0, claimtrace.Summary{}, "", err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { p.runSaturated(pctx, r.w, int64(20*c.slots)); close(done) }()
	warm := max(time.Second, c.capacityDur/4)
	time.Sleep(warm)
	r.tr.Reset()
	s0, t0 := r.w.Stats().Succeeded, time.Now()
	time.Sleep(c.capacityDur)
	s1, t1 := r.w.Stats().Succeeded, time.Now()
	claim := r.tr.Total()
	load := loadavg()
	cancel()
	<-done
	_ = r.stop()
	return float64(s1-s0) / t1.Sub(t0).Seconds(), claim, load, nil
}

// runSoak offers Load × capacity jobs/s for SoakDur on a fresh database and samples the queue
// table every SampleEvery.
func runSoak(ctx context.Context, c *config, adminURL string, logf func(string, ...any), progress func(*Soak)) (*Soak, error) {
	sk := &Soak{Load: c.soakLoad, Slots: c.slots, RetentionS: c.soakRetain.Seconds(), SampleEveryS: c.sampleEvery.Seconds(),
		StartedAt: time.Now().UTC()}
	// Capacity on a fresh table overstates what the soak's table sustains once it holds its
	// retention's worth of finished rows (a soak at 70 % of it fell 2 % behind, its backlog
	// growing all run); so it is measured again on a table holding what a soak at this
	// share of the fresh capacity would retain, and the soak offers the share of that.
	if c.soakCap > 0 {
		// Given (-soak-capacity): nothing measured here.
		sk.CapacityPerS, sk.CapacityLoad = c.soakCap, "given"
		sk.OfferedPerS = c.soakLoad * c.soakCap
		logf("    capacity %.0f jobs/s given (-soak-capacity); offering %.0f jobs/s for %v", c.soakCap, sk.OfferedPerS, c.soakDur)
	} else {
		fresh, _, freshLoad, err := measureCapacity(ctx, c, adminURL, logf, 0)
		if err != nil {
			return nil, fmt.Errorf("capacity: %w", err)
		}
		sk.CapacityFreshPerS = fresh
		sk.RetainedRows = int(c.soakLoad * fresh * c.soakRetain.Seconds())
		logf("    capacity on a fresh table %.0f jobs/s (load %s); again with %d finished rows retained", fresh, freshLoad, sk.RetainedRows)
		capPS, capClaim, capLoad, err := measureCapacity(ctx, c, adminURL, logf, sk.RetainedRows)
		if err != nil {
			return nil, fmt.Errorf("capacity with retained rows: %w", err)
		}
		sk.CapacityPerS, sk.CapacityClaim, sk.CapacityLoad = capPS, capClaim, capLoad
		sk.OfferedPerS = c.soakLoad * capPS
		logf("    capacity %.0f jobs/s with the retained rows (load %s); offering %.0f jobs/s for %v", capPS, capLoad, sk.OfferedPerS, c.soakDur)
	}
	e, err := newEnv(ctx, c, adminURL, fmt.Sprintf("tscale_%d_soak", pid()), logf)
	if err != nil {
		return nil, err
	}
	defer e.drop()
	r, err := newRig(ctx, c, e.url, []string{"default"}, c.slots, false, func(wc *worker.Config) {
		wc.FinishedRetention = c.soakRetain
	})
	if err != nil {
		return nil, err
	}
	defer r.close()
	client, err := jobs.NewClient(r.app, &jobs.Config{})
	if err != nil {
		return nil, err
	}
	mon, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer mon.Close(context.Background())
	// Counting ready rows must read the claim index, never the whole table.
	if _, err := mon.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		return nil, err
	}
	p := &producer{client: client, pad: sut.Pad(c.payload)}
	if err := r.w.Start(ctx); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { p.runRate(pctx, sk.OfferedPerS); close(done) }()
	tick := time.NewTicker(c.sampleEvery)
	lastT, lastS, lastI := start, int64(0), int64(0)
	r.tr.Interval()
loop:
	for {
		select {
		case <-ctx.Done():
			sk.Error = "interrupted"
			break loop
		case now := <-tick.C:
			succ, ins := r.w.Stats().Succeeded, p.inserted.Load()
			dt := now.Sub(lastT).Seconds()
			smp := Sample{T: now.Sub(start).Seconds(), OfferedPerS: sk.OfferedPerS,
				InsertedPS: float64(ins-lastI) / dt, CompletedPS: float64(succ-lastS) / dt,
				Claim: r.tr.Interval(), Load: loadavg()}
			lastT, lastS, lastI = now, succ, ins
			if err := mon.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state = 'ready'`).Scan(&smp.Ready); err != nil {
				sk.Error = err.Error()
				break loop
			}
			if smp.Sizes, err = readSizes(ctx, mon); err != nil {
				sk.Error = err.Error()
				break loop
			}
			sk.Samples = append(sk.Samples, smp)
			logf("    soak t=%4.0fs completed %6.0f/s claim p99 %6.2f ms ready %6d heap %6.1f MB dead %8d load %s",
				smp.T, smp.CompletedPS, smp.Claim.P99Ms, smp.Ready, float64(smp.Sizes.TableBytes)/(1<<20), smp.Sizes.Dead, smp.Load)
			if progress != nil {
				sk.Slopes = slopes(sk.Samples)
				progress(sk)
			}
			if now.Sub(start) >= c.soakDur {
				break loop
			}
		}
	}
	tick.Stop()
	cancel()
	<-done
	st := r.w.Stats()
	sk.DurationS = time.Since(start).Seconds()
	sk.Inserted, sk.Succeeded, sk.Pruned, sk.Claim = p.inserted.Load(), st.Succeeded, st.Pruned, r.tr.Total()
	if n := p.errors.Load(); n > 0 && sk.Error == "" {
		sk.Error = fmt.Sprintf("%d insert statements failed", n)
	}
	if err := r.stop(); err != nil && sk.Error == "" {
		sk.Error = "worker stop: " + err.Error()
	}
	sk.Slopes = slopes(sk.Samples)
	if math.IsNaN(sk.OfferedPerS) {
		sk.OfferedPerS = 0
	}
	return sk, nil
}
