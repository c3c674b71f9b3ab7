package procstat

import (
	"os"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	// Burn 50 ms of this process's CPU, measured by getrusage (wall time is not CPU time on a
	// loaded machine), then check that /proc agrees within the clock tick.
	start := SelfCPU()
	for SelfCPU()-start < 50*time.Millisecond {
	}
	p, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.Start == 0 || p.CPU <= 0 {
		t.Fatalf("unexpected %+v", p)
	}
	if p.CPU < 40*time.Millisecond {
		t.Fatalf("/proc says %s of CPU after burning 50ms", p.CPU)
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
