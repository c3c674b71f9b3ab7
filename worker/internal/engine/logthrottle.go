package engine

import (
	"sync"
	"time"
)

// ErrorLogEvery is how often a repeating engine failure (claim, heartbeat, reclaim, prune,
// finish write retry, registry heartbeat, listener connection) is logged at most: a database that is down for an
// hour gives one line per source every ErrorLogEvery, with the number of failures since the
// previous line, instead of thousands.
// Every failure is still counted in Stats (ClaimErrors, HeartbeatErrors, ReclaimErrors,
// PruneErrors) and remembered as Stats.LastError.
const ErrorLogEvery = 10 * time.Second

// LogThrottle lets one line through per Every and counts the ones it holds back.
type LogThrottle struct {
	mu         sync.Mutex
	Every      time.Duration // set before first use
	last       time.Time
	suppressed int64
}

// Allow reports whether a line may be logged now and, if so, how many were held back since
// the previous one.
func (t *LogThrottle) Allow(now time.Time) (bool, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.Every {
		t.suppressed++
		return false, 0
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	return true, n
}
