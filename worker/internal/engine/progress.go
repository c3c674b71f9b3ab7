package engine

import (
	"sync/atomic"
	"time"
)

// This file is a running job's progress (Progress). The handler's call only stores the latest
// value in its execution; the queue loop's heartbeat (heartbeat.go) carries it to the database
// in the heartbeat statement of the queue's due jobs, fenced like the lease (id, running, claim
// token): a stale attempt's progress is never written. A job whose heartbeat is far off is
// made due by its unsent progress once ProgressEvery has passed since its last progress write,
// so progress costs at most one heartbeat statement per queue per ProgressEvery, shared by
// every job of the queue with progress to write, and nothing when the heartbeat is due anyway.
// The finish writes the last value too (with the success, or into the failed attempt's entry
// of the error history).

// ProgressEvery is worker.ProgressEvery: the most often a job's progress is written on its
// own account (a test checks the two are equal).
const ProgressEvery = time.Second

// progressState is an execution's progress. The handler writes val then sets dirty; the
// queue loop clears dirty then reads val, so it always sends a value at least as new as the
// one that made it dirty.
type progressState struct {
	val   atomic.Pointer[[]byte] // the latest encoded generics.Progress; handler writes, loop and finishers read
	dirty atomic.Bool            // val not yet handed to a heartbeat

	// Owned by the queue loop.
	next time.Time // progress alone makes the job's heartbeat due from then on
	sent bool      // the heartbeat in flight carries this job's progress
}

// due reports whether unsent progress makes the job's heartbeat due at now.
func (p *progressState) due(now time.Time) bool {
	return p.dirty.Load() && !now.Before(p.next)
}

// take returns the progress to send with a heartbeat at now (JSON null: none), on the loop.
func (p *progressState) take(now time.Time) []byte {
	if !p.dirty.Swap(false) {
		return jsonNull
	}
	v := p.val.Load()
	if v == nil {
		return jsonNull
	}
	p.sent = true
	p.next = now.Add(ProgressEvery)
	return *v
}

// settled applies the heartbeat's result on the loop: a failed statement sends it again.
func (p *progressState) settled(failed bool) {
	if p.sent && failed {
		p.dirty.Store(true)
	}
	p.sent = false
}

// last is the latest progress for a finish (nil: none).
func (p *progressState) last() []byte {
	if v := p.val.Load(); v != nil {
		return *v
	}
	return nil
}

// SetProgress records b, the JSON of a generics.Progress package worker checked
// (worker.Progress), as the attempt's progress: the next heartbeat carries it.
func (e *Execution) SetProgress(b []byte) {
	e.prog.val.Store(&b)
	e.prog.dirty.Store(true)
}
