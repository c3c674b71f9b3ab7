package engine

import (
	"strconv"
	"strings"
)

// The payloads of the notifications the worker's listener (worker/listener.go) reads.

// ParseJobsPayload reads a tenure_jobs notification: "queue" (inserters before December 2026,
// and SQL that enqueues without the hint), or "queue\x1fpriority\x1frun_at_us": the
// priority band and the oldest due time of the jobs just committed there, which may lie
// behind the band's watermark (worker/claim.go, "Watermarks").
func ParseJobsPayload(p string) (queue string, prio int, runAtUs int64, hinted bool) {
	q, rest, ok := strings.Cut(p, "\x1f")
	if !ok {
		return p, 0, 0, false
	}
	ps, ts, ok := strings.Cut(rest, "\x1f")
	if !ok {
		return p, 0, 0, false
	}
	pr, err1 := strconv.Atoi(ps)
	t, err2 := strconv.ParseInt(ts, 10, 64)
	if err1 != nil || err2 != nil || pr < MinPriority || pr > MaxPriority || t <= 0 {
		return p, 0, 0, false
	}
	return q, pr, t, true
}

// ParseIDs reads a comma-separated list of job ids (the await channel's payload); what does
// not parse is skipped.
func ParseIDs(p string) []int64 {
	ids := make([]int64, 0, strings.Count(p, ",")+1)
	for _, f := range strings.Split(p, ",") {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
