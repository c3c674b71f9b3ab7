package tenuresut

import "testing"

func TestPeakPool(t *testing.T) {
	// Default: engine pool 3 + 2 finishers + 2 claimers = 7, plus the LISTEN session.
	if n, err := peakPool(20, nil); err != nil || n != 12 {
		t.Fatalf("peakPool(20) = %d, %v; want 12", n, err)
	}
	if n, err := peakPool(20, map[string]string{"engine": "10"}); err != nil || n != 9 {
		t.Fatalf("peakPool(20, engine 10) = %d, %v; want 9", n, err)
	}
	for _, tune := range []map[string]string{
		{"pool": "13"},        // 13 + 7 + 1 > 20
		{"engine": "18"},      // leaves 1 for the shared pool
		{"concurrency": "-1"}, // not positive
		{"linger": "soon"},    // not a duration
		{"nosuch": "1"},
	} {
		if n, err := peakPool(20, tune); err == nil {
			t.Errorf("peakPool(20, %v) = %d, want an error", tune, n)
		}
	}
	p, err := parsePeak(map[string]string{"concurrency": "300", "claimers": "3", "finishers": "1", "linger": "-1ms"})
	if err != nil {
		t.Fatal(err)
	}
	if p.concurrency != 300 || p.claimers != 3 || p.finishers != 1 || p.engine != 7 || p.linger >= 0 ||
		p.claimBatch != PeakMaxClaimBatch || p.finishBatch != PeakFinishBatch {
		t.Fatalf("parsePeak: %+v", p)
	}
}
