package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenureq/tenure/bench/internal/adapter"
	"github.com/tenureq/tenure/bench/internal/adaptertest"
)

// buildAdapter compiles this command into a temporary directory.
func buildAdapter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tenure-adapter")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

type runResult struct {
	stdout, stderr string
	exitCode       int
	shutdown       time.Duration
}

// runAdapter starts the binary with env, lets it run for d (0: wait for it to exit by itself),
// sends SIGTERM and waits at most 5 s for it to exit.
func runAdapter(t *testing.T, bin string, env map[string]string, d time.Duration) runResult {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var res runResult
	var err error
	if d == 0 {
		select {
		case err = <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("adapter did not exit by itself\nstderr:\n%s", stderr.String())
		}
	} else {
		select {
		case err = <-exited:
			t.Fatalf("adapter exited early (%v)\nstderr:\n%s", err, stderr.String())
		case <-time.After(d):
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		select {
		case err = <-exited:
			res.shutdown = time.Since(sent)
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("adapter still running 5s after SIGTERM\nstderr:\n%s", stderr.String())
		}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.exitCode = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	res.stdout, res.stderr = stdout.String(), stderr.String()
	return res
}

func TestAdapterContract(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL-backed processes")
	}
	dbURL := adaptertest.FreshDatabase(t, "tenure_adapter")
	bin := buildAdapter(t)
	base := map[string]string{
		"DATABASE_URL": dbURL, "SCENARIO": "long_horizon", "JOB_PAYLOAD_BYTES": "256", "SAMPLE_EVERY_S": "1",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	t.Run("migrate_only", func(t *testing.T) {
		res := runAdapter(t, bin, with("SCENARIO", "migrate_only"), 0)
		if res.exitCode != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", res.exitCode, res.stderr)
		}
		st, err := adapter.Validate(strings.NewReader(res.stdout), "tenure", 1)
		if err != nil {
			t.Fatalf("contract violation: %v\nstdout:\n%s", err, res.stdout)
		}
		if len(st.Ticks) != 0 || st.Descriptor["event_tables"].([]any)[0] != "tenure.jobs" {
			t.Fatalf("unexpected stream: %s", res.stdout)
		}
	})

	t.Run("fixed", func(t *testing.T) {
		res := runAdapter(t, bin, with("PRODUCER_MODE", "fixed", "PRODUCER_RATE", "300",
			"WORKER_COUNT", "8", "JOB_WORK_MS", "1"), 5*time.Second)
		if res.exitCode != 0 {
			t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", res.exitCode, res.stderr)
		}
		t.Logf("exited 0, %s after SIGTERM", res.shutdown.Round(time.Millisecond))
		st, err := adapter.Validate(strings.NewReader(res.stdout), "tenure", 1)
		if err != nil {
			t.Fatalf("contract violation: %v\nstdout:\n%s\nstderr:\n%s", err, res.stdout, res.stderr)
		}
		adaptertest.CheckSemantics(t, st, 300)
		if st.Descriptor["db_name"] != "tbench_test_tenure_adapter_"+strconv.Itoa(os.Getpid()) {
			t.Errorf("db_name = %v", st.Descriptor["db_name"])
		}
	})

	t.Run("depth-target", func(t *testing.T) {
		// Two workers at 20 ms a job drain ~100 jobs/s; the producer must hold the depth near
		// TARGET_DEPTH instead of at a rate.
		res := runAdapter(t, bin, with("PRODUCER_MODE", "depth-target", "TARGET_DEPTH", "400",
			"WORKER_COUNT", "2", "JOB_WORK_MS", "20"), 4*time.Second)
		if res.exitCode != 0 {
			t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", res.exitCode, res.stderr)
		}
		st, err := adapter.Validate(strings.NewReader(res.stdout), "tenure", 1)
		if err != nil {
			t.Fatalf("contract violation: %v\nstdout:\n%s", err, res.stdout)
		}
		if len(st.Ticks) < 2 {
			t.Fatalf("only %d ticks", len(st.Ticks))
		}
		last := st.Ticks[len(st.Ticks)-1].Values
		if d := last["queue_depth"]; d < 200 || d > 800 {
			t.Errorf("queue_depth %v, target 400", d)
		}
		if last["completion_rate"] <= 0 {
			t.Errorf("nothing completed")
		}
	})

	t.Run("bad_env", func(t *testing.T) {
		res := runAdapter(t, bin, with("PRODUCER_MODE", "bursty"), 0)
		if res.exitCode == 0 || res.stdout != "" || !strings.Contains(res.stderr, "PRODUCER_MODE") {
			t.Fatalf("exit %d, stdout %q, stderr %q", res.exitCode, res.stdout, res.stderr)
		}
	})
}
