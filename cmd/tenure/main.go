package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/jobs"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// env is what a command runs with; tests supply their own.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// stdin answers confirmation prompts (tenure migrate down); stdinTerminal reports whether
	// it is an interactive terminal (nil: it is not).
	stdin         io.Reader
	stdinTerminal func() bool
	// secrets are the spellings of the database password, scrubbed from every printed error.
	secrets []string
	// schema is the schema Tenure lives in (-schema, else $TENURE_SCHEMA, else tenure), set
	// by connect and migrate once validated.
	schema string
}

// clientConfig is the jobs.Config of the command's client: its schema.
func (e *env) clientConfig() *jobs.Config { return &jobs.Config{Schema: e.schema} }

// interactive reports whether a confirmation can be asked on stdin.
func (e *env) interactive() bool {
	return e.stdin != nil && e.stdinTerminal != nil && e.stdinTerminal()
}

// command is one top-level subcommand. A new one registers itself from its own file:
//
//	func init() { register(&command{name: "jobs", summary: "...", run: runJobs}) }
type command struct {
	name    string
	summary string // one line, for the top-level usage
	// run gets the arguments after the command name and returns an exit code.
	run func(ctx context.Context, e *env, args []string) int
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("tenure: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, stdin: os.Stdin, stdinTerminal: stdinIsTerminal}, os.Args[1:])
	stop()
	os.Exit(code)
}

// stdinIsTerminal reports whether standard input is a character device (a terminal).
func stdinIsTerminal() bool {
	fi, err := os.Stdin.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// run dispatches args (without the program name) and returns the exit code.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, e, []string{"-h"})
			}
		}
		usage(e.stdout)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "tenure: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return exitUsage
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: tenure <command> [arguments]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%s\n", n, commands[n].summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "tenure help <command>" or "tenure <command> -h" for details.
Database commands connect to -database-url, else $DATABASE_URL, and work in schema
-schema, else $TENURE_SCHEMA, else tenure.
Exit codes: 0 success, 1 failure, 2 usage error.
`)
}

// errUsage marks an error as the user's (exit code 2).
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usageErrorf(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCode maps an error to an exit code, printing it: a missing Tenure table or function
// becomes migrations.ErrNotMigrated with its hint, the database password is scrubbed, and
// control characters (the error may quote a value from the database) are escaped.
func exitCode(e *env, prefix string, err error) int {
	if err == nil {
		return exitOK
	}
	err = migrations.WrapNotMigrated(err)
	fmt.Fprintf(e.stderr, "%s: %s\n", prefix, esc(scrub(err.Error(), e.secrets)))
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFail
}

// newFlagSet returns a flag set that reports errors instead of exiting, printing its
// usage (synopsis, then the flags) to e.stderr.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimRight(synopsis, "\n"))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args; -h prints usage to stdout and returns exitOK with done set. A bad
// flag prints the flag package's one-line error and a pointer to -h, not the whole usage.
func parseFlags(e *env, fs *flag.FlagSet, args []string) (code int, done bool) {
	full := fs.Usage
	fs.Usage = func() {} // the flag package calls it on errors and on -h; we decide below
	err := fs.Parse(args)
	fs.Usage = full
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK, true
	default:
		// The flag package already printed the error.
		fmt.Fprintf(e.stderr, "Run \"tenure %s -h\" for usage.\n", fs.Name())
		return exitUsage, true
	}
}

// dbFlags are the database flags every database command takes.
type dbFlags struct {
	url    string // -database-url
	schema string // -schema
}

// databaseFlag adds -database-url and -schema to fs; resolve them with databaseURL and
// resolveSchema (connect does both).
func databaseFlag(fs *flag.FlagSet) *dbFlags {
	f := &dbFlags{}
	fs.StringVar(&f.url, "database-url", "", "PostgreSQL connection URL (default $DATABASE_URL)")
	fs.StringVar(&f.schema, "schema", "", "PostgreSQL schema Tenure lives in (default $TENURE_SCHEMA, else tenure)")
	return f
}

// resolveSchema sets e.schema to the flag's value, else $TENURE_SCHEMA, else "tenure", and
// refuses an invalid name (a usage error wrapping migrations.ErrInvalidSchema).
func resolveSchema(e *env, f dbFlags) error {
	name := f.schema
	if name == "" {
		name = e.getenv("TENURE_SCHEMA")
	}
	if name == "" {
		name = migrations.DefaultSchema
	}
	if _, err := migrations.NewRunner(migrations.Options{Schema: name}); err != nil {
		return usageErrorf("%v", err)
	}
	e.schema = name
	return nil
}

// runner is the migrations runner of e's schema (resolveSchema validated it).
func (e *env) runner() *migrations.Runner {
	r, err := migrations.NewRunner(migrations.Options{Schema: e.schema})
	if err != nil {
		panic(err) // resolveSchema validated the name
	}
	return r
}

// databaseURL returns the flag's value, else $DATABASE_URL, else a usage error.
func databaseURL(e *env, f dbFlags) (string, error) {
	if err := resolveSchema(e, f); err != nil {
		return "", err
	}
	if flagValue := f.url; flagValue != "" {
		return flagValue, nil
	}
	if v := e.getenv("DATABASE_URL"); v != "" {
		return v, nil
	}
	return "", usageErrorf("no database: pass -database-url or set DATABASE_URL")
}

// connect opens a small pool on the database (-database-url's value, else $DATABASE_URL) and
// checks that the server answers and that Tenure's schema is migrated (migrations.Check): a
// database behind this release is refused with migrations.ErrNotMigrated and its hint; one
// ahead of it (migrated by a newer release) gets a warning on stderr.
func connect(ctx context.Context, e *env, flagValue dbFlags) (*pgxpool.Pool, error) {
	url, err := databaseURL(e, flagValue)
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, e, url)
	if err != nil {
		return nil, err
	}
	switch err := e.runner().Check(ctx, pool); {
	case errors.Is(err, migrations.ErrSchemaTooNew):
		fmt.Fprintf(e.stderr, "warning: %s\n", esc(err.Error()))
	case err != nil:
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// openPool opens a small pool on url and checks that the server answers. The URL's password
// never shows in its errors (parseDSN), and is added to e.secrets for exitCode to scrub.
func openPool(ctx context.Context, e *env, url string) (*pgxpool.Pool, error) {
	cfg, secrets, err := parseDSN(url)
	e.secrets = append(e.secrets, secrets...)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting: %w", err)
	}
	return pool, nil
}
