package testkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvChildRole is set in the environment of a process started by StartChild: the test
// binary's TestMain checks ChildRole and runs the child's code instead of the tests.
const EnvChildRole = "TENURE_TESTKIT_CHILD"

// ChildRole returns the role this process was started in by StartChild, or "" when it is
// a normal test run.
func ChildRole() string { return os.Getenv(EnvChildRole) }

// Child is the test binary re-executed as a child process (for tests that SIGKILL a process at
// a chosen point). It reports by printing lines on stdout, which the parent collects; its
// stdin is a pipe that closes when the parent dies, so children should exit on stdin EOF.
type Child struct {
	cmd *exec.Cmd

	mu      sync.Mutex
	lines   []string
	partial []byte
	stderr  bytes.Buffer
	changed chan struct{}

	exited chan struct{}
}

// StartChild starts the test binary with EnvChildRole=role and the extra environment
// entries ("K=V"). The child is SIGKILLed and reaped when t ends; its output is logged when t
// failed.
func StartChild(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &Child{changed: make(chan struct{}), exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(append(os.Environ(), EnvChildRole+"="+role), env...)
	c.cmd.Stdout = (*childStdout)(c)
	c.cmd.Stderr = (*childStderr)(c)
	if _, err := c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", role, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Kill(t)
		if t.Failed() {
			c.mu.Lock()
			t.Logf("child %s (pid %d) stdout:\n%s\nstderr:\n%s", role, c.cmd.Process.Pid, strings.Join(c.lines, "\n"), c.stderr.String())
			c.mu.Unlock()
		}
	})
	return c
}

type childStdout Child
type childStderr Child

func (w *childStdout) Write(p []byte) (int, error) {
	c := (*Child)(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.lines = append(c.lines, string(c.partial[:i]))
		c.partial = c.partial[i+1:]
		added = true
	}
	if added {
		close(c.changed)
		c.changed = make(chan struct{})
	}
	return len(p), nil
}

func (w *childStderr) Write(p []byte) (int, error) {
	c := (*Child)(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stderr.Len() < 64<<10 {
		c.stderr.Write(p)
	}
	return len(p), nil
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Lines returns a copy of the stdout lines printed so far.
func (c *Child) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// WaitLine waits until the child printed a line starting with prefix and returns it. It fails
// t when the child exits first or timeout passes.
func (c *Child) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for _, l := range c.lines {
			if strings.HasPrefix(l, prefix) {
				c.mu.Unlock()
				return l
			}
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.exited:
			c.mu.Lock()
			stderr := c.stderr.String()
			c.mu.Unlock()
			t.Fatalf("child exited before printing %q; stderr:\n%s", prefix, stderr)
		case <-deadline.C:
			t.Fatalf("child printed no %q line within %v", prefix, timeout)
		}
	}
}

// Kill SIGKILLs the child and waits until it is reaped (at most 20 s).
func (c *Child) Kill(t testing.TB) {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("child pid %d did not exit after SIGKILL", c.cmd.Process.Pid)
	}
}

// ChildPrintf prints one report line to stdout, for the parent (safe for concurrent use).
func ChildPrintf(format string, args ...any) {
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

var printMu sync.Mutex

// ExitOnStdinEOF exits the child process with code 3 when its stdin closes (the parent is
// gone), so no child outlives its test.
func ExitOnStdinEOF() {
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				os.Exit(3)
			}
		}
	}()
}
