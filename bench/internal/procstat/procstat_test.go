package procstat

import (
	"os"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn some CPU
	}
	p, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.Start == 0 || p.CPU <= 0 {
		t.Fatalf("unexpected %+v", p)
	}
	if SelfCPU() < 40*time.Millisecond {
		t.Fatalf("SelfCPU = %s after burning 50ms", SelfCPU())
	}
	if b, err := MachineBusy(); err != nil || b <= 0 {
		t.Fatalf("MachineBusy = %s, %v", b, err)
	}
}

func TestDeltaCountsNewAndReusedPIDs(t *testing.T) {
	before := Snapshot{1: {PID: 1, Start: 10, CPU: time.Second}, 2: {PID: 2, Start: 20, CPU: time.Second}}
	after := Snapshot{
		1: {PID: 1, Start: 10, CPU: 3 * time.Second}, // same process: delta
		2: {PID: 2, Start: 99, CPU: time.Second},     // pid reused: all of it
		3: {PID: 3, Start: 30, CPU: 2 * time.Second}, // new: all of it
	}
	d := Delta(before, after)
	if d[1] != 2*time.Second || d[2] != time.Second || d[3] != 2*time.Second {
		t.Fatalf("delta = %v", d)
	}
}
