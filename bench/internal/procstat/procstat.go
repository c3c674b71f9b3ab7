// Package procstat measures CPU time: of this process (getrusage) and of the PostgreSQL server
// processes (utime+stime from /proc/<pid>/stat). It only works when PostgreSQL runs on the same
// host and /proc/<pid>/stat of its processes is readable (true for root or the postgres user).
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is 100 on every
// Linux architecture Go supports (the kernel fixes it for the userspace ABI).
const clockTicks = 100

// SelfCPU returns user+system CPU time consumed so far by this process (all threads).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Proc is one process's identity and cumulative CPU.
type Proc struct {
	PID   int
	PPID  int
	Comm  string
	Start uint64 // starttime in ticks since boot: tells a reused pid apart
	CPU   time.Duration
}

// ReadProc parses /proc/<pid>/stat.
func ReadProc(pid int) (Proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, err
	}
	// comm is parenthesised and may itself contain spaces or parentheses: split at the last ')'.
	open := bytes.IndexByte(b, '(')
	closeIdx := bytes.LastIndexByte(b, ')')
	if open < 0 || closeIdx < open {
		return Proc{}, fmt.Errorf("procstat: malformed /proc/%d/stat", pid)
	}
	comm := string(b[open+1 : closeIdx])
	fields := strings.Fields(string(b[closeIdx+1:]))
	// fields[0] is state (field 3); utime is field 14, stime 15, starttime 22 (1-based).
	if len(fields) < 20 {
		return Proc{}, fmt.Errorf("procstat: short /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(fields[1])
	ut, _ := strconv.ParseUint(fields[11], 10, 64)
	st, _ := strconv.ParseUint(fields[12], 10, 64)
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return Proc{
		PID: pid, PPID: ppid, Comm: comm, Start: start,
		CPU: time.Duration(ut+st) * time.Second / clockTicks,
	}, nil
}

// Snapshot is the CPU of a set of processes at one instant, keyed by pid.
type Snapshot map[int]Proc

// PostgresProcs returns every process whose comm is "postgres" (the postmaster and all its
// children: backends, checkpointer, walwriter, autovacuum workers, ...).
func PostgresProcs() (Snapshot, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := Snapshot{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := ReadProc(pid)
		if err != nil || p.Comm != "postgres" {
			continue
		}
		out[pid] = p
	}
	return out, nil
}

// Delta returns the CPU each process consumed between before and after. A process present in
// after but not in before (or whose pid was reused) started inside the interval, so all its
// CPU counts. Processes that exited inside the interval are lost: take the after snapshot
// before closing connections.
func Delta(before, after Snapshot) map[int]time.Duration {
	out := make(map[int]time.Duration, len(after))
	for pid, a := range after {
		if b, ok := before[pid]; ok && b.Start == a.Start {
			out[pid] = a.CPU - b.CPU
		} else {
			out[pid] = a.CPU
		}
	}
	return out
}

// MachineBusy returns the CPU time all processors have spent not idle since boot (user, nice,
// system, irq, softirq and steal from the first line of /proc/stat).
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("procstat: unexpected /proc/stat")
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, _ := strconv.ParseUint(f[i], 10, 64)
		busy += v
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
