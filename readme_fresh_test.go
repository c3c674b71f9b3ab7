package tenure_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/pgtest"
)

// TestReadmeInAFreshModule follows the README in a new module outside this repository, as an
// application that uses the core: `go get`, the generator recipe (go get -tool, //go:generate
// go tool tenuregen, go generate), then the quickstart as a program that applies the schema
// with the README's migrations.Up snippet to an empty database, runs the job and stops with
// SIGINT, and the README's tenuretest test, run with `go test`. The module imports only the
// core, and `go list -m all` must name none of the integrations' dependencies (chromedp,
// nats, prometheus, OpenTelemetry, go.yaml.in/yaml). The module requires Tenure through a
// replace directive pointing at this checkout; the other modules come from the module proxy
// ($GOPROXY), so the test is skipped when the proxy cannot be reached.
func TestReadmeInAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fresh module (-short)")
	}
	readme, m := readmeAndFreshModule(t, "example.com/quickstart", "github.com/tenureq/tenure")

	// The README's commands, exactly as written.
	m.sh(readmeLine(t, readme, "go get github.com/tenureq/tenure"))
	m.sh(readmeLine(t, readme, "go get -tool github.com/tenureq/tenure/cmd/tenuregen"))
	m.write("receipts/jobs.go", "package receipts\n\n"+readmeBlock(t, readme, "//go:generate"))
	m.run(m.goBin, "generate", "./...")
	if _, err := os.Stat(filepath.Join(m.dir, "receipts", "tenure_gen.go")); err != nil {
		t.Fatalf("go generate wrote no tenure_gen.go: %v", err)
	}

	// The quickstart as a program: the schema applied by the README's migrations.Up snippet,
	// then the quickstart, plus the generated insert-only client.
	argsType := readmeBlock(t, readme, "type SendReceipt struct {\n\tOrderID int64  `json:\"order_id\"`\n")
	m.write("main.go", `package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tenureq/tenure/db/migrations"
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
	{
		ctx := context.Background()
`+indent(readmeBlock(t, readme, "applied, err := migrations.Up(ctx, pool)"), 2)+`	}
	if _, err := receipts.NewInsertClient(pool, nil); err != nil {
		panic(err)
	}
`+indent(readmeBlock(t, readme, "// Ctrl-C or SIGTERM cancels ctx"), 1)+`	fmt.Println("stopped")
}
`)
	// The README's test, in the same package.
	m.write("main_test.go", `package main

import (
	"context"
	"testing"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/tenuretest"
)

`+readmeBlock(t, readme, "func TestMain(m *testing.M) { tenuretest.Main(m) }"))
	m.run(m.goBin, "mod", "tidy")

	// Done when: an application of jobs and worker resolves none of the integrations' modules.
	for _, mod := range strings.Fields(m.run(m.goBin, "list", "-m", "all")) {
		for _, banned := range []string{"github.com/chromedp/", "github.com/nats-io/", "github.com/prometheus/", "go.opentelemetry.io/", "go.yaml.in/yaml"} {
			if strings.HasPrefix(mod, banned) {
				t.Errorf("go list -m all of a module importing only the core names %s", mod)
			}
		}
	}

	bin := filepath.Join(m.dir, "quickstart")
	m.run(m.goBin, "build", "-o", bin, ".")

	// Run it on an empty database: migrations.Up applies the schema, the job runs, then
	// SIGINT stops the worker gracefully and the program exits 0.
	prog := exec.Command(bin)
	prog.Env = append(os.Environ(), "DATABASE_URL="+pgtest.NewEmptyDB(t))
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
	deadline := time.After(60 * time.Second)
	var got []string
	for sent, done := false, false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				if err := prog.Wait(); err != nil {
					t.Fatalf("quickstart: %v; stdout %q; stderr:\n%s", err, got, stderr.String())
				}
				want := fmt.Sprintf("migrations applied: %d", len(migrations.All()))
				if len(got) != 3 || got[0] != want || got[1] != "receipt for order 42 to ada@example.com (attempt 1)" || got[2] != "stopped" {
					t.Fatalf("quickstart printed %q, want %q, the receipt, \"stopped\"; stderr:\n%s", got, want, stderr.String())
				}
				if !strings.Contains(stderr.String(), "context cancelled: graceful stop") {
					t.Fatalf("the log does not say what SIGINT did:\n%s", stderr.String())
				}
				done = true
				continue
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

	// The README's test passes, against this test's server (else it would start its own).
	m.env = append(m.env, "TEST_DATABASE_URL="+pgtest.AdminURL(t))
	if out := m.run(m.goBin, "test", "-count=1", "-v", "-run", "TestReceipt", "."); !strings.Contains(out, "--- PASS: TestReceipt") {
		t.Fatalf("the README's test did not run:\n%s", out)
	}
}

// TestReadmeCLIAndIntegrationsInAFreshModule follows the README's CLI and integration lines in
// a new module outside this repository: `go get -tool .../cmd/tenure`, then `go tool tenure
// migrate up` as written (the DATABASE_URL placeholder replaced by an empty database's URL),
// which must leave the schema migrated; then `go get` of each integration module and the
// README's integration snippet, which must build and vet. As TestReadmeInAFreshModule, Tenure's
// modules come from this checkout by replace directives, the rest from the module proxy.
func TestReadmeCLIAndIntegrationsInAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fresh module (-short)")
	}
	readme, m := readmeAndFreshModule(t, "example.com/ops", "github.com/tenureq/tenure",
		"github.com/tenureq/tenure/cmd/tenure", "github.com/tenureq/tenure/tenureprom",
		"github.com/tenureq/tenure/tenureotel", "github.com/tenureq/tenure/tenureui",
		"github.com/tenureq/tenure/tenurenats")

	// The CLI, as the README says.
	getCLI := readmeLine(t, readme, "go get -tool github.com/tenureq/tenure/cmd/tenure")
	if getCLI != "go get -tool github.com/tenureq/tenure/cmd/tenure" {
		t.Fatalf("the README's CLI line is %q", getCLI)
	}
	m.sh(getCLI)
	if !strings.Contains(readme, "`go tool tenure -h` lists its commands") {
		t.Fatal("the README no longer says how to list the CLI's commands")
	}
	if help := m.run(m.goBin, "tool", "tenure", "-h"); !strings.Contains(help, "migrate") || !strings.Contains(help, "serve") {
		t.Fatalf("go tool tenure -h:\n%s", help)
	}
	migrate := readmeLine(t, readme, "DATABASE_URL=postgres://... go tool tenure migrate up")
	url := pgtest.NewEmptyDB(t)
	out := m.sh(strings.Replace(migrate, "postgres://...", "'"+url+"'", 1))
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM tenure.schema_migrations").Scan(&n); err != nil || n != len(migrations.All()) {
		t.Fatalf("after %q: %d migrations recorded (want %d), err %v; output:\n%s", migrate, n, len(migrations.All()), err, out)
	}

	// Each integration: go get as the README says, then its snippet compiles and vets.
	get := readmeLine(t, readme, "Each is a module of its own (`go get github.com/tenureq/tenure/tenureprom`")
	if !strings.Contains(get, "likewise `tenureotel`") {
		t.Fatalf("the README's integrations line changed: %q", get)
	}
	for _, mod := range []string{"tenureprom", "tenureotel", "tenureui", "tenurenats"} {
		m.sh("go get github.com/tenureq/tenure/" + mod)
	}
	m.write("integrations.go", `package main

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/tenureotel"
	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/tenureui"
	"github.com/tenureq/tenure/worker"
)

// integrations is the README's snippet; its free names are the parameters.
func integrations(ctx context.Context, pool *pgxpool.Pool, w *worker.Worker, js jetstream.JetStream, mux *http.ServeMux,
	jobsConfig *jobs.Config, workerConfig *worker.Config) error {
`+indent(readmeBlock(t, readme, "// tenureprom:"), 1)+`	return nil
}

func main() { _ = integrations }
`)
	m.run(m.goBin, "mod", "tidy")
	m.run(m.goBin, "vet", ".")
	m.run(m.goBin, "build", "-o", filepath.Join(m.dir, "ops"), ".")
}

// freshModule is a new module outside this repository, in a temporary directory.
type freshModule struct {
	t     *testing.T
	dir   string
	goBin string
	env   []string
}

// readmeAndFreshModule returns the README and a fresh module named path that requires each of
// Tenure's modules in ours (what `go get` leaves), with this checkout standing in for the
// published modules by replace directives.
func readmeAndFreshModule(t *testing.T, path string, ours ...string) (string, *freshModule) {
	t.Helper()
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
	m := &freshModule{t: t, dir: t.TempDir(), goBin: goBin}
	m.env = append(os.Environ(), "GOPROXY="+moduleProxy(t, goBin), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var mod strings.Builder
	fmt.Fprintf(&mod, "module %s\n\ngo 1.26\n\nrequire (\n", path)
	for _, p := range ours {
		fmt.Fprintf(&mod, "\t%s v0.0.0-00010101000000-000000000000\n", p)
	}
	mod.WriteString(")\n\n")
	for _, p := range ours {
		fmt.Fprintf(&mod, "replace %s => %s\n", p, filepath.Join(repo, strings.TrimPrefix(strings.TrimPrefix(p, "github.com/tenureq/tenure"), "/")))
	}
	m.write("go.mod", mod.String())
	return string(readme), m
}

func (m *freshModule) write(name, content string) {
	m.t.Helper()
	p := filepath.Join(m.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// run runs a command in the module and returns its combined output; the test fails if it fails.
func (m *freshModule) run(name string, args ...string) string {
	m.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = m.dir, m.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		m.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sh runs a README command line with sh in the module.
func (m *freshModule) sh(line string) string {
	m.t.Helper()
	return m.run("sh", "-c", line)
}

// indent prefixes each line of a snippet with n tabs.
func indent(snippet string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(snippet, "\n"), "\n") {
		if l != "" {
			l = strings.Repeat("\t", n) + l
		}
		b.WriteString(l + "\n")
	}
	return b.String()
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
