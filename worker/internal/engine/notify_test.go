package engine

import (
	"reflect"
	"testing"
)

// TestParseJobsPayload: a hinted payload (queue␟priority␟run_at_us) gives its band and due
// time; a bare queue name (older inserters, SQL without the hint) and anything malformed give
// the whole payload as the queue, unhinted.
func TestParseJobsPayload(t *testing.T) {
	for _, tc := range []struct {
		p      string
		queue  string
		prio   int
		runAt  int64
		hinted bool
	}{
		{"default", "default", 0, 0, false},
		{"default\x1f2\x1f1764752400000000", "default", 2, 1764752400000000, true},
		{"a b\x1f9\x1f1", "a b", 9, 1, true},
		{"q\x1f0\x1f1", "q\x1f0\x1f1", 0, 0, false},   // priority below the bands
		{"q\x1f10\x1f1", "q\x1f10\x1f1", 0, 0, false}, // above
		{"q\x1f2\x1f0", "q\x1f2\x1f0", 0, 0, false},   // no due time
		{"q\x1f2", "q\x1f2", 0, 0, false},
		{"q\x1fx\x1f1", "q\x1fx\x1f1", 0, 0, false},
		{"", "", 0, 0, false},
	} {
		q, prio, runAt, hinted := ParseJobsPayload(tc.p)
		if q != tc.queue || prio != tc.prio || runAt != tc.runAt || hinted != tc.hinted {
			t.Errorf("ParseJobsPayload(%q) = %q, %d, %d, %t; want %q, %d, %d, %t", tc.p, q, prio, runAt, hinted, tc.queue, tc.prio, tc.runAt, tc.hinted)
		}
	}
}

// TestParseIDs: the await channel's comma-separated ids; what does not parse is skipped.
func TestParseIDs(t *testing.T) {
	for p, want := range map[string][]int64{
		"1":        {1},
		"1,22,333": {1, 22, 333},
		"1,x,3":    {1, 3},
		"":         {},
	} {
		if got := ParseIDs(p); !reflect.DeepEqual(got, want) {
			t.Errorf("ParseIDs(%q) = %v, want %v", p, got, want)
		}
	}
}
