// Package pgserver finds a PostgreSQL server for tests, or starts a throwaway one.
//
// Ensure tries, in order:
//
//  1. the URL in $TEST_DATABASE_URL, trusted as is (it should name an admin database, such
//     as "postgres", on a role allowed to create databases);
//  2. a server answering on 127.0.0.1:5432 as user postgres without a password, unless
//     $TENURE_PGSERVER_SKIP_DEFAULT is set to a true value (1, true, yes);
//  3. a throwaway cluster: initdb into a temporary directory, started with pg_ctl on a free
//     port of 127.0.0.1 with durability turned off. The binaries are looked up in
//     $TENURE_PGSERVER_BINDIR, then next to pg_ctl on $PATH, then in the highest
//     /usr/lib/postgresql/*/bin, then /usr/local/pgsql/bin. When running as root they run as
//     the unprivileged user "postgres" (or "nobody"), since PostgreSQL refuses to run as root.
//
// A started cluster is stopped, and its directory removed, by Server.Stop. A watchdog
// process also stops it if the process that started it dies without calling Stop, and
// leftovers of dead owners are removed the next time a cluster is started.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables read by Ensure.
const (
	// EnvURL names the variable holding the URL of a server to use as is.
	EnvURL = "TEST_DATABASE_URL"
	// EnvSkipDefault names the variable that, when true, skips probing 127.0.0.1:5432.
	EnvSkipDefault = "TENURE_PGSERVER_SKIP_DEFAULT"
	// EnvBinDir names the variable holding a directory with initdb, pg_ctl and postgres.
	EnvBinDir = "TENURE_PGSERVER_BINDIR"
)

// DefaultURL is the server probed in step 2 of Ensure.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=2"

// ErrNoBinaries is returned by Start (and Ensure) when no PostgreSQL server binaries are
// found. Its message says how to install them.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL server reachable and no PostgreSQL binaries (initdb, pg_ctl, postgres) found: install PostgreSQL (e.g. `apt-get install postgresql`) or set " + EnvURL)

// ErrNotFound is returned by Find when neither $TEST_DATABASE_URL nor the default server
// is usable.
var ErrNotFound = errors.New("pgserver: no PostgreSQL server found ($" + EnvURL + " unset and nothing usable on 127.0.0.1:5432)")

// Server is a PostgreSQL server to run tests against.
type Server struct {
	// URL is a postgres:// URL of the server's admin database ("postgres"), for a role
	// that may create databases.
	URL string
	// Started reports whether Ensure started this server (a throwaway cluster), in which
	// case Stop stops it.
	Started bool

	root, dataDir string
	opts, logFile string // pg_ctl -o options and server log of a started cluster
	bin           *binaries
	cred          *syscall.Credential
	watchdog      *exec.Cmd
	logf          func(string, ...any)
	stopOnce      sync.Once
	stopErr       error
}

// Ensure returns a server to run tests against: $TEST_DATABASE_URL, else the default
// server on 127.0.0.1:5432, else a throwaway cluster it starts (see the package doc).
// logf, which may be nil, receives progress messages. Call Stop when done; it does
// nothing for a server Ensure did not start.
func Ensure(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	logf = orNop(logf)
	if s, err := Find(ctx, logf); err == nil {
		return s, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return Start(ctx, logf)
}

// Find returns the server named by $TEST_DATABASE_URL, else the default server on
// 127.0.0.1:5432 if it accepts user postgres without a password and may create databases
// (unless $TENURE_PGSERVER_SKIP_DEFAULT is true). It never starts anything; it returns
// ErrNotFound when neither is usable.
func Find(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	logf = orNop(logf)
	if u := strings.TrimSpace(os.Getenv(EnvURL)); u != "" {
		logf("pgserver: using $%s", EnvURL)
		return &Server{URL: u}, nil
	}
	if envTrue(os.Getenv(EnvSkipDefault)) {
		logf("pgserver: $%s set, not probing 127.0.0.1:5432", EnvSkipDefault)
		return nil, ErrNotFound
	}
	if err := probe(ctx, DefaultURL); err != nil {
		logf("pgserver: default server 127.0.0.1:5432 not usable: %v", err)
		return nil, ErrNotFound
	}
	logf("pgserver: using the server on 127.0.0.1:5432")
	return &Server{URL: DefaultURL}, nil
}

// probe connects to u and checks that the role may create databases.
func probe(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = 2 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user").Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("role may not create databases")
	}
	return nil
}

// Start starts a throwaway cluster (step 3 of Ensure) regardless of any other server.
func Start(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	return StartWith(ctx, logf, Options{})
}

// Options adjust a cluster started by StartWith.
type Options struct {
	// Settings are extra server settings, "name=value" each, applied after the defaults (so
	// they override them): e.g. "synchronous_commit=on" for a cluster whose crashes must not
	// lose committed transactions (fsync stays off: a crash of the server processes loses
	// nothing written to the operating system, only a crash of the machine would).
	Settings []string
	// Stock starts the cluster with the distribution's stock settings instead of the speed-ups
	// tests use (fsync, synchronous_commit, full_page_writes and shared_buffers keep their
	// defaults; only the address, port, socket, max_connections and logging are set):
	// benchmarks that publish figures run on it.
	Stock bool
}

// StartWith is Start with options. Fault-injection tests use it for a private cluster they
// may crash and restart (Restart, Halt, Resume).
func StartWith(ctx context.Context, logf func(format string, args ...any), o Options) (*Server, error) {
	logf = orNop(logf)
	for _, kv := range o.Settings {
		if k, _, ok := strings.Cut(kv, "="); !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(kv, "'\"\n") {
			return nil, fmt.Errorf("pgserver: setting %q: want name=value without quotes", kv)
		}
	}
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := unprivilegedCredential()
	if err != nil {
		return nil, err
	}
	reapStale(bin, cred, logf)

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startOnce(ctx, bin, cred, logf, o)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		logf("pgserver: start attempt %d failed: %v", attempt+1, err)
	}
	return nil, lastErr
}

const (
	dirPrefix = "tenure-pgserver-"
	ownerFile = "owner.pid"
)

func startOnce(ctx context.Context, bin *binaries, cred *syscall.Credential, logf func(string, ...any), o Options) (_ *Server, err error) {
	root, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	s := &Server{Started: true, root: root, dataDir: filepath.Join(root, "data"), bin: bin, cred: cred, logf: logf}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{root, filepath.Join(root, ownerFile)} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgserver: chown %s: %w", p, err)
			}
		}
	}

	t0 := time.Now()
	if out, err := s.run(ctx, bin.initdb, "-D", s.dataDir, "-A", "trust", "-U", "postgres",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil { // --no-sync: initdb's own files only
		return nil, fmt.Errorf("pgserver: initdb: %w\n%s", err, tail(out, 20))
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	optList := []string{
		"-c listen_addresses=127.0.0.1",
		"-c port=" + strconv.Itoa(port),
		"-c unix_socket_directories='" + root + "'",
		"-c max_connections=300",
		"-c log_min_messages=warning",
	}
	if !o.Stock {
		optList = append(optList, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off", "-c shared_buffers=256MB")
	}
	for _, kv := range o.Settings {
		optList = append(optList, "-c "+kv)
	}
	opts := strings.Join(optList, " ")
	logFile := filepath.Join(root, "postgres.log")
	s.opts, s.logFile = opts, logFile
	if out, err := s.run(ctx, bin.pgCtl, "start", "-w", "-t", "60", "-D", s.dataDir, "-l", logFile, "-o", opts); err != nil {
		logTail, _ := os.ReadFile(logFile)
		return nil, fmt.Errorf("pgserver: pg_ctl start: %w\n%s\n%s", err, tail(out, 10), tail(logTail, 20))
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	s.startWatchdog()

	if err := probe(ctx, s.URL); err != nil {
		return nil, fmt.Errorf("pgserver: started cluster not usable: %w", err)
	}
	who := "current user"
	if cred != nil {
		who = "uid " + strconv.Itoa(int(cred.Uid))
	}
	logf("pgserver: started throwaway PostgreSQL (%s) on 127.0.0.1:%d as %s in %s (%.1fs)",
		bin.dir, port, who, root, time.Since(t0).Seconds())
	return s, nil
}

// Stop stops a server that Ensure started and removes its directory. For a server it did
// not start, Stop does nothing. Stop is idempotent.
func (s *Server) Stop() error {
	if s == nil || !s.Started {
		return nil
	}
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	if s.watchdog != nil && s.watchdog.Process != nil {
		// The watchdog leads its own session: kill the group, its sleep included.
		_ = syscall.Kill(-s.watchdog.Process.Pid, syscall.SIGKILL)
		_ = s.watchdog.Wait()
	}
	var err error
	if _, statErr := os.Stat(filepath.Join(s.dataDir, "postmaster.pid")); statErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, e := s.run(ctx, s.bin.pgCtl, "stop", "-D", s.dataDir, "-m", "fast", "-w", "-t", "60"); e != nil {
			err = fmt.Errorf("pgserver: pg_ctl stop: %w: %s", e, tail(out, 5))
			if _, e2 := s.run(ctx, s.bin.pgCtl, "stop", "-D", s.dataDir, "-m", "immediate", "-w", "-t", "30"); e2 == nil {
				err = nil
			}
		}
	}
	if e := os.RemoveAll(s.root); e != nil && err == nil {
		err = e
	}
	if err == nil && s.logf != nil {
		s.logf("pgserver: stopped throwaway PostgreSQL in %s", s.root)
	}
	return err
}

// Shutdown modes of pg_ctl, for Restart and Halt.
const (
	ModeSmart     = "smart"     // wait for every session to end
	ModeFast      = "fast"      // roll back and disconnect sessions, checkpoint, exit
	ModeImmediate = "immediate" // kill every server process: a crash, recovered from WAL at the next start
)

var errNotStarted = errors.New("pgserver: not a cluster this process started")

func checkMode(mode string) error {
	switch mode {
	case ModeSmart, ModeFast, ModeImmediate:
		return nil
	}
	return fmt.Errorf("pgserver: unknown shutdown mode %q", mode)
}

// Restart stops a started cluster with the given shutdown mode (ModeFast, ModeImmediate,
// ModeSmart) and starts it again with the same settings and port, waiting until it accepts
// connections. After ModeImmediate the start runs crash recovery.
func (s *Server) Restart(ctx context.Context, mode string) error {
	if err := s.Halt(ctx, mode); err != nil {
		return err
	}
	return s.Resume(ctx)
}

// Halt stops a started cluster with the given shutdown mode and waits until it is down. The
// cluster's files stay; Resume starts it again, Stop removes it.
func (s *Server) Halt(ctx context.Context, mode string) error {
	if s == nil || !s.Started {
		return errNotStarted
	}
	if err := checkMode(mode); err != nil {
		return err
	}
	if out, err := s.run(ctx, s.bin.pgCtl, "stop", "-D", s.dataDir, "-m", mode, "-w", "-t", "60"); err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop -m %s: %w: %s", mode, err, tail(out, 5))
	}
	return nil
}

// Resume starts a cluster stopped by Halt with its settings and port, and waits until it
// accepts connections.
func (s *Server) Resume(ctx context.Context) error {
	if s == nil || !s.Started {
		return errNotStarted
	}
	if out, err := s.run(ctx, s.bin.pgCtl, "start", "-w", "-t", "60", "-D", s.dataDir, "-l", s.logFile, "-o", s.opts); err != nil {
		logTail, _ := os.ReadFile(s.logFile)
		return fmt.Errorf("pgserver: pg_ctl start: %w\n%s\n%s", err, tail(out, 10), tail(logTail, 20))
	}
	return probe(ctx, s.URL)
}

// Running reports whether a started cluster's postmaster is up (pg_ctl status).
func (s *Server) Running(ctx context.Context) bool {
	if s == nil || !s.Started {
		return false
	}
	_, err := s.run(ctx, s.bin.pgCtl, "status", "-D", s.dataDir)
	return err == nil
}

// DataDir returns the data directory of a started cluster ("" for a found server).
func (s *Server) DataDir() string {
	if s == nil || !s.Started {
		return ""
	}
	return s.dataDir
}

// run runs a PostgreSQL binary as the unprivileged user (when root) in the server's root.
func (s *Server) run(ctx context.Context, path string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = s.root
	cmd.Env = childEnv()
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// startWatchdog starts a detached shell that stops the cluster and removes its directory
// once this process is gone, in case it dies without calling Stop (test timeout, kill -9).
func (s *Server) startWatchdog() {
	script := fmt.Sprintf(`while [ -d /proc/%d ]; do sleep 1; done; %s stop -D %s -m immediate -w -t 30 >/dev/null 2>&1; rm -rf %s`,
		os.Getpid(), shellQuote(s.bin.pgCtl), shellQuote(s.dataDir), shellQuote(s.root))
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		s.logf("pgserver: watchdog not started: %v", err)
		return
	}
	s.watchdog = cmd
}

// reapStale stops and removes clusters left by processes that died without Stop and
// whose watchdog did not run either.
func reapStale(bin *binaries, cred *syscall.Credential, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, root := range dirs {
		b, err := os.ReadFile(filepath.Join(root, ownerFile))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue // owner alive
		}
		logf("pgserver: removing stale cluster %s (owner pid %d gone)", root, pid)
		s := &Server{root: root, dataDir: filepath.Join(root, "data"), bin: bin, cred: cred}
		if _, err := os.Stat(filepath.Join(s.dataDir, "postmaster.pid")); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = s.run(ctx, bin.pgCtl, "stop", "-D", s.dataDir, "-m", "immediate", "-w", "-t", "20")
			cancel()
		}
		_ = os.RemoveAll(root)
	}
}

type binaries struct {
	dir, initdb, pgCtl, postgres string
}

// findBinaries looks for a directory holding initdb, pg_ctl and postgres.
func findBinaries() (*binaries, error) {
	var dirs []string
	if d := os.Getenv(EnvBinDir); d != "" {
		dirs = append(dirs, d)
	}
	for _, name := range []string{"pg_ctl", "initdb"} {
		if p, err := exec.LookPath(name); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	dirs = append(dirs, versionedDirs("/usr/lib/postgresql/*/bin")...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, d := range dirs {
		b := &binaries{dir: d, initdb: filepath.Join(d, "initdb"), pgCtl: filepath.Join(d, "pg_ctl"), postgres: filepath.Join(d, "postgres")}
		if isExec(b.initdb) && isExec(b.pgCtl) && isExec(b.postgres) {
			return b, nil
		}
	}
	return nil, ErrNoBinaries
}

var versionRE = regexp.MustCompile(`/([0-9]+)(?:\.([0-9]+))?/bin$`)

// versionedDirs expands pattern and sorts the matches by version number, highest first.
func versionedDirs(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	key := func(d string) [2]int {
		sm := versionRE.FindStringSubmatch(d)
		if sm == nil {
			return [2]int{-1, -1}
		}
		a, _ := strconv.Atoi(sm[1])
		b, _ := strconv.Atoi(sm[2])
		return [2]int{a, b}
	}
	sort.SliceStable(m, func(i, j int) bool {
		ki, kj := key(m[i]), key(m[j])
		if ki[0] != kj[0] {
			return ki[0] > kj[0]
		}
		return ki[1] > kj[1]
	})
	return m
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// unprivilegedCredential returns nil when not root, else the credential of user postgres,
// falling back to nobody.
func unprivilegedCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, errors.New("pgserver: running as root and neither user postgres nor nobody exists; PostgreSQL refuses to run as root")
}

// childEnv is the environment without libpq/PostgreSQL variables that could redirect the
// binaries, with a neutral locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DatabaseURL returns base with its database name replaced by dbname. base is a
// postgres:// or postgresql:// URL, or a keyword/value connection string ("host=... dbname=...").
func DatabaseURL(base, dbname string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err == nil {
			u.Path = "/" + dbname
			u.RawPath = ""
			return u.String()
		}
	}
	kv := "dbname=" + quoteKV(dbname)
	re := regexp.MustCompile(`(^|\s)dbname\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
	if re.MatchString(base) {
		return re.ReplaceAllStringFunc(base, func(m string) string {
			if len(m) > 0 && (m[0] == ' ' || m[0] == '\t' || m[0] == '\n') {
				return m[:1] + kv
			}
			return kv
		})
	}
	if strings.TrimSpace(base) == "" {
		return kv
	}
	return base + " " + kv
}

func quoteKV(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func envTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func orNop(logf func(string, ...any)) func(string, ...any) {
	if logf == nil {
		return func(string, ...any) {}
	}
	return logf
}
