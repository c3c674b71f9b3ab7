package riversut

import (
	"testing"
	"time"
)

func TestPeakPool(t *testing.T) {
	if n, err := peakPool(20, nil); err != nil || n != 19 {
		t.Fatalf("peakPool(20) = %d, %v; want 19 (the cap less the listener's session)", n, err)
	}
	if n, err := peakPool(20, map[string]string{"pool": "4"}); err != nil || n != 4 {
		t.Fatalf("peakPool(20, pool 4) = %d, %v", n, err)
	}
	for _, tune := range []map[string]string{{"pool": "20"}, {"pool": "x"}, {"cooldown": "0s"}, {"nosuch": "1"}} {
		if n, err := peakPool(20, tune); err == nil {
			t.Errorf("peakPool(20, %v) = %d, want an error", tune, n)
		}
	}
	p, err := parsePeak(nil)
	if err != nil || p.maxWorkers != 2000 || p.cooldown != 2*time.Millisecond || p.poll != 20*time.Millisecond {
		t.Fatalf("riverbench's settings: %+v, %v", p, err)
	}
}
