package worker

import (
	"sync"
	"time"

	"github.com/tenureq/tenure/internal/logkey"
)

// errorLogEvery is how often a repeating engine failure (claim, heartbeat, reclaim, prune,
// finish write retry, registry heartbeat, listener connection) is logged at most: a database that is down for an
// hour gives one line per source every errorLogEvery, with the number of failures since the
// previous line, instead of thousands.
// Every failure is still counted in Stats (ClaimErrors, HeartbeatErrors, ReclaimErrors,
// PruneErrors) and remembered as Stats.LastError.
const errorLogEvery = 10 * time.Second

// logThrottle lets one line through per interval and counts the ones it holds back.
type logThrottle struct {
	mu         sync.Mutex
	every      time.Duration
	last       time.Time
	suppressed int64
}

// allow reports whether a line may be logged now and, if so, how many were held back since
// the previous one.
func (t *logThrottle) allow(now time.Time) (bool, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		t.suppressed++
		return false, 0
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	return true, n
}

// engineError records a failure of one of the engine's own statements: remembered as the
// last error (Stats.LastError/LastErrorAt) and logged at most once per errorLogEvery per
// source, with the count of failures not logged since. A permission error (SQLSTATE 42501: the
// role lacks a grant, which no retry fixes) is counted in Stats.PermissionErrors and logged at
// ERROR, naming tenure.grant_worker; others at WARN.
func (w *Worker) engineError(t *logThrottle, what string, err error, attrs ...any) {
	now := w.clk.Now()
	perm := isPermissionError(err)
	if perm {
		w.m.permissionErrors.Add(1)
	}
	w.m.mu.Lock()
	w.m.lastError, w.m.lastErrorAt = what+": "+err.Error(), now
	w.m.mu.Unlock()
	ok, n := t.allow(now)
	if !ok {
		return
	}
	attrs = append(attrs, logkey.Err, err)
	if n > 0 {
		attrs = append(attrs, logkey.NotLogged, n)
	}
	if perm {
		w.log.Error("tenure: "+what+" failed: the database role lacks a privilege; as the owner of schema "+w.sch.Name()+" run SELECT "+w.sch.Name()+".grant_worker('role') (repeats are logged at most every "+errorLogEvery.String()+")", attrs...)
		return
	}
	w.log.Warn("tenure: "+what+" failed (repeats are logged at most every "+errorLogEvery.String()+")", attrs...)
}
