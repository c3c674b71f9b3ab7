package tenure_test

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenureq/tenure/internal/pgtest"
)

// TestReadmeInAFreshModule follows the README in a new module outside this repository: the
// generator recipe (go get -tool, //go:generate go tool tenuregen, go generate), then the
// quickstart as a program, which it runs against a migrated database and stops with SIGINT.
// The module requires Tenure through a replace directive pointing at this checkout; the
// other modules come from the module proxy ($GOPROXY), so the test is skipped when the
// proxy cannot be reached.
func TestReadmeInAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fresh module (-short)")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	proxy := moduleProxy(t, goBin)

	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What `go get github.com/tenureq/tenure` leaves, with this checkout standing in for the
	// published module.
	write("go.mod", "module example.com/quickstart\n\ngo 1.26\n\n"+
		"require github.com/tenureq/tenure v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/tenureq/tenure => "+repo+"\n")
	env := append(os.Environ(), "GOPROXY="+proxy, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// The generator, exactly as the README says.
	getTool := readmeLine(t, string(readme), "go get -tool ")
	run("sh", "-c", getTool)
	write("receipts/jobs.go", "package receipts\n\n"+readmeBlock(t, string(readme), "//go:generate"))
	run(goBin, "generate", "./...")
	if _, err := os.Stat(filepath.Join(dir, "receipts", "tenure_gen.go")); err != nil {
		t.Fatalf("go generate wrote no tenure_gen.go: %v", err)
	}

	// The quickstart as a program, plus the generated insert-only client.
	argsType := readmeBlock(t, string(readme), "type SendReceipt struct {\n\tOrderID int64  `json:\"order_id\"`\n")
	quick := readmeBlock(t, string(readme), "// Ctrl-C or SIGTERM cancels ctx")
	var body strings.Builder
	for _, l := range strings.Split(strings.TrimRight(quick, "\n"), "\n") {
		body.WriteString("\t" + l + "\n")
	}
	write("main.go", `package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"

	"example.com/quickstart/receipts"
)

`+argsType+`
func main() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := receipts.NewInsertClient(pool, nil); err != nil {
		panic(err)
	}
`+body.String()+`	fmt.Println("stopped")
}
`)
	cmd := exec.Command(goBin, "mod", "tidy")
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "quickstart")
	run(goBin, "build", "-o", bin, ".")

	// Run it: the job runs, then SIGINT stops the worker gracefully and the program exits 0.
	prog := exec.Command(bin)
	prog.Env = append(os.Environ(), "DATABASE_URL="+pgtest.NewMigratedDB(t))
	stdout, err := prog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	prog.Stderr = &stderr
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	var got []string
	for sent := false; ; {
		select {
		case l, ok := <-lines:
			if !ok {
				if err := prog.Wait(); err != nil {
					t.Fatalf("quickstart: %v; stdout %q; stderr:\n%s", err, got, stderr.String())
				}
				if len(got) != 2 || got[0] != "receipt for order 42 to ada@example.com (attempt 1)" || got[1] != "stopped" {
					t.Fatalf("quickstart printed %q; stderr:\n%s", got, stderr.String())
				}
				if !strings.Contains(stderr.String(), "context cancelled: graceful stop") {
					t.Fatalf("the log does not say what SIGINT did:\n%s", stderr.String())
				}
				return
			}
			got = append(got, l)
			if strings.HasPrefix(l, "receipt for order") && !sent {
				sent = true
				time.Sleep(100 * time.Millisecond) // let the finish land; the stop would wait anyway
				_ = prog.Process.Signal(os.Interrupt)
			}
		case <-deadline:
			_ = prog.Process.Kill()
			t.Fatalf("quickstart did not finish; stdout %q; stderr:\n%s", got, stderr.String())
		}
	}
}

// moduleProxy returns a GOPROXY for the fresh module: $GOPROXY's proxies without "direct"
// (there is no network beyond the proxy), each falling through on any error ("|") to an
// empty file proxy, so that a proxy refusing to answer about github.com/tenureq/tenure (it is
// not published; the replace directive provides it) reads as "not found". It skips the test
// when the first proxy cannot be reached.
func moduleProxy(t *testing.T, goBin string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", "GOPROXY").Output()
	if err != nil {
		t.Skipf("go env GOPROXY: %v", err)
	}
	var proxies []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			proxies = append(proxies, p)
		}
	}
	if len(proxies) == 0 {
		t.Skip("GOPROXY names no module proxy (direct/off): cannot fetch the fresh module's dependencies")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(strings.TrimSuffix(proxies[0], "/") + "/github.com/jackc/pgx/v5/@v/list")
	if err != nil {
		t.Skipf("module proxy %s unreachable: %v", proxies[0], err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Skipf("module proxy %s answered %s", proxies[0], resp.Status)
	}
	empty := t.TempDir()
	return strings.Join(proxies, "|") + "|file://" + filepath.ToSlash(empty)
}

// readmeLine returns the first README line that starts with prefix.
func readmeLine(t *testing.T, readme, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(readme, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("README.md has no line starting with %q", prefix)
	return ""
}

// readmeBlock returns the body of the first ```go block of the README that starts with start.
func readmeBlock(t *testing.T, readme, start string) string {
	t.Helper()
	i := strings.Index(readme, "```go\n"+start)
	if i < 0 {
		t.Fatalf("README.md has no go block starting with %q", start)
	}
	body := readme[i+len("```go\n"):]
	return body[:strings.Index(body, "```\n")]
}
