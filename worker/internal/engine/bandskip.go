package engine

import (
	"sync/atomic"
	"time"
)

// Empty bands. A batched claim's request (worker/claimbatch.go) probes its segments in order, one index descent each, and a claim of
// a queue with few slots (one job per request) reached the one band holding work only after
// probing every higher band: with the default bands and normal-priority jobs, 8 descents per
// job. So a queue's batched claims skip the bands its recent claims found empty (BandSkip): a
// band that a claim probed and found without a claimable job is left out of the queue's next
// requests for at most BandSkipFor, and probed again after that. Skipping never changes the
// order in which the remaining bands are served, and it stops at once
//   - for a band a NOTIFY announced a job of (a hinted insert: the hint is taken after the
//     claim that found the band empty started, so that claim may have missed it);
//   - for every band while a NOTIFY without a hint is unaccounted for (the queue's plainNotified), on full
//     claims (they read every band from its start), and after a claim of the queue came back
//     short or failed (a queue that is not busy probes every band, as before).
// What skipping costs: a job that becomes claimable in a band a busy queue found empty without a
// hinted NOTIFY (a retry's or a scheduled job's due time passing, a job released or reclaimed)
// waits up to BandSkipFor longer than the queue's next claim (TestClaimBatchSkippedBandIsProbedAgain).

// ClaimSeg is one segment of a batched claim's request, as ClaimOrderedMany takes it (one
// per band and age window of the queue's plan, with the band's watermark).
type ClaimSeg struct {
	Priority                 int16
	AfterUs, MinAgeUs, MaxUs int64
}

// BandSkipFor is how long a band a queue's batched claim found empty is left out of that
// queue's next batched claims (see "Empty bands" above).
const BandSkipFor = time.Second

// BandSkip is what a queue's batched claims learnt about its bands. Claim goroutines write and
// read it (atomics: a queue may have several claims in flight, and any of their observations
// is a valid one); the listener records hints.
type BandSkip struct {
	// emptyAt: per band, when (clock, unix ns) the latest claim that found the band empty
	// started; 0: not known empty.
	emptyAt [MaxPriority + 1]atomic.Int64
	// hintAt: per band, when the latest NOTIFY announcing a job of the band arrived.
	hintAt [MaxPriority + 1]atomic.Int64
	// short: the queue's latest batched claim claimed fewer jobs than it asked for, or failed.
	short atomic.Bool
}

// Hinted records a NOTIFY announcing a job of band prio (listener).
func (b *BandSkip) Hinted(prio int, now time.Time) {
	if prio >= MinPriority && prio <= MaxPriority {
		b.hintAt[prio].Store(now.UnixNano())
	}
}

// oneSegmentPerBand reports whether segs holds each band at most once (the plans without
// aging windows): only then does an empty segment mean an empty band.
func oneSegmentPerBand(segs []ClaimSeg) bool {
	var seen [MaxPriority + 1]bool
	for _, s := range segs {
		if s.Priority < MinPriority || s.Priority > MaxPriority || seen[s.Priority] {
			return false
		}
		seen[s.Priority] = true
	}
	return true
}

// Filter returns the segments a request probes: segs without the bands known empty (see
// "Empty bands"), or segs unchanged when none is skippable or every one would be.
func (b *BandSkip) Filter(segs []ClaimSeg, now time.Time, noticeUnhinted bool) []ClaimSeg {
	if noticeUnhinted || b.short.Load() || !oneSegmentPerBand(segs) {
		return segs
	}
	t := now.UnixNano()
	skip := func(s ClaimSeg) bool {
		e := b.emptyAt[s.Priority].Load()
		// A clock that went back (t < e) skips nothing.
		return e != 0 && e > b.hintAt[s.Priority].Load() && t >= e && t-e < int64(BandSkipFor)
	}
	n := 0
	for _, s := range segs {
		if !skip(s) {
			n++
		}
	}
	if n == len(segs) || n == 0 {
		return segs
	}
	out := make([]ClaimSeg, 0, n)
	for _, s := range segs {
		if !skip(s) {
			out = append(out, s)
		}
	}
	return out
}

// Record learns from a batched claim that started at start, probed segs (in order) for n jobs
// and returned rows (or err): the bands it probed and found empty, and whether it came back short.
// A claim that filled its batch probed its segments up to the last band it claimed from; one
// that came back short probed them all.
func (b *BandSkip) Record(segs []ClaimSeg, n int, rows []ClaimRow, err error, start time.Time) {
	if err != nil {
		b.short.Store(true)
		return
	}
	b.short.Store(len(rows) < n)
	if !oneSegmentPerBand(segs) {
		return
	}
	var got [MaxPriority + 1]bool
	for i := range rows {
		if p := int(deref0(rows[i].Priority)); p >= MinPriority && p <= MaxPriority {
			got[p] = true
		}
	}
	probed := len(segs)
	if len(rows) >= n {
		for probed > 0 && !got[segs[probed-1].Priority] {
			probed--
		}
	}
	t := start.UnixNano()
	for i, s := range segs {
		switch {
		case got[s.Priority]:
			b.emptyAt[s.Priority].Store(0)
		case i < probed:
			b.emptyAt[s.Priority].Store(t)
		}
	}
}
