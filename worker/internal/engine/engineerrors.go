package engine

import (
	"github.com/tenureq/tenure/internal/logkey"
)

// engineError records a failure of one of the engine's own statements: remembered as the
// last error (Stats.LastError/LastErrorAt) and logged at most once per ErrorLogEvery per
// source, with the count of failures not logged since. A permission error (SQLSTATE 42501: the
// role lacks a grant, which no retry fixes) is counted in Stats.PermissionErrors and logged at
// ERROR, naming tenure.grant_worker; others at WARN.
func (w *Engine) engineError(t *LogThrottle, what string, err error, attrs ...any) {
	now := w.clk.Now()
	perm := IsPermissionError(err)
	if perm {
		w.m.PermissionErrors.Add(1)
	}
	w.m.mu.Lock()
	w.m.lastError, w.m.lastErrorAt = what+": "+err.Error(), now
	w.m.mu.Unlock()
	ok, n := t.Allow(now)
	if !ok {
		return
	}
	attrs = append(attrs, logkey.Err, err)
	if n > 0 {
		attrs = append(attrs, logkey.NotLogged, n)
	}
	if perm {
		w.log.Error("tenure: "+what+" failed: the database role lacks a privilege; as the owner of schema "+w.sch.Name()+" run SELECT "+w.sch.Name()+".grant_worker('role') (repeats are logged at most every "+ErrorLogEvery.String()+")", attrs...)
		return
	}
	w.log.Warn("tenure: "+what+" failed (repeats are logged at most every "+ErrorLogEvery.String()+")", attrs...)
}

// retryStale runs fn, and again at once each time it fails with StalePlan. Every engine
// connection caches every statement, so after a schema change each connection refuses each
// affected statement once, and the retry may be handed another connection that still holds
// the stale statement; one call may run a few statements (a claim's pipeline: lock,
// completions, claim; the sweep's transaction), each refused at most once per connection: the
// bound is staleStatementsPerCall tries per connection of the engine pool, plus one.
// Without it a migration under load failed claims, heartbeats, finishes and sweeps, one
// connection after another, for as long as each took to come round (issue 29).
// fn must be safe to run again after an StalePlan error: the statement (or the transaction
// it was in) changed nothing.
func (w *Engine) retryStale(fn func() error) error {
	tries := 1
	if w.eng != nil {
		tries += staleStatementsPerCall * int(w.eng.Config().MaxConns)
	}
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i >= tries || !StalePlan(err) {
			return err
		}
		w.m.StalePlanRetries.Add(1)
	}
}

// staleStatementsPerCall bounds the statements of one engine call that a schema change can
// make stale (retryStale).
const staleStatementsPerCall = 4
