package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/migrations"
)

func init() {
	register(&command{
		name:    "migrate",
		summary: "apply (up), roll back (down) or list (status) the schema migrations",
		run:     runMigrate,
	})
}

const migrateUsage = `Usage: tenure migrate <up|down|status> [flags]

  up       apply every pending migration
  down     roll back the most recent migration(s): -steps N (default 1). It lists the
           migrations it would revert and the tables that drops (with their rows), then asks
           for "yes" on the terminal; -yes skips the question (for scripts). Without a
           terminal and without -yes it refuses.
  status   list the migrations and whether each is applied

Migrations run one per transaction under an advisory lock, so several instances may run
"migrate up" at once. A database migrated by a newer tenure is refused (exit code 1).`

func runMigrate(ctx context.Context, e *env, args []string) int {
	// Flags may come before the action too: tenure migrate -database-url URL up
	fs := newFlagSet(e, "migrate", migrateUsage)
	dbURL := databaseFlag(fs)
	steps := fs.Int("steps", 1, "(down) number of migrations to roll back (more than are applied: all of them)")
	yes := fs.Bool("yes", false, "(down) revert without asking for confirmation")
	if code, done := parseFlags(e, fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "tenure migrate: missing action (up, down or status)")
		fs.Usage()
		return exitUsage
	}
	action, rest := fs.Arg(0), fs.Args()[1:]
	switch action {
	case "up", "down", "status":
	default:
		fmt.Fprintf(e.stderr, "tenure migrate: unknown action %q\n", action)
		fs.Usage()
		return exitUsage
	}
	// ... and after it: tenure migrate down -steps 2
	if code, done := parseFlags(e, fs, rest); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "tenure migrate %s: unexpected arguments %q\n", action, fs.Args())
		return exitUsage
	}
	for _, name := range []string{"steps", "yes"} {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		if set && action != "down" {
			fmt.Fprintf(e.stderr, "tenure migrate %s: -%s only applies to down\n", action, name)
			return exitUsage
		}
	}
	if *steps < 1 {
		fmt.Fprintf(e.stderr, "tenure migrate down: -steps must be at least 1, got %d\n", *steps)
		return exitUsage
	}
	url, err := databaseURL(e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure migrate", err)
	}
	pool, err := openPool(ctx, e, url)
	if err != nil {
		return exitCode(e, "tenure migrate", err)
	}
	defer pool.Close()

	prefix := "tenure migrate " + action
	switch action {
	case "up":
		applied, err := e.runner().Up(ctx, pool)
		for _, m := range applied {
			fmt.Fprintf(e.stdout, "applied  %04d_%s\n", m.Version, m.Name)
		}
		if err != nil {
			return exitCode(e, prefix, err)
		}
		if len(applied) == 0 {
			fmt.Fprintf(e.stdout, "up to date (version %d)\n", migrations.Latest())
		}
	case "down":
		return migrateDown(ctx, e, pool, *steps, *yes)
	case "status":
		st, err := e.runner().Status(ctx, pool)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		printStatus(e, st)
	}
	return exitOK
}

// migrateDown reverts the steps most recent migrations after saying which, and which tables
// that drops, and getting a confirmation: yes, else "yes" typed on a terminal.
func migrateDown(ctx context.Context, e *env, pool *pgxpool.Pool, steps int, yes bool) int {
	const prefix = "tenure migrate down"
	st, err := e.runner().Status(ctx, pool)
	if err != nil {
		return exitCode(e, prefix, err)
	}
	known := map[int]migrations.Migration{}
	for _, m := range migrations.All() {
		known[m.Version] = m
	}
	var applied []migrations.Migration // newest first
	for i := len(st) - 1; i >= 0; i-- {
		if st[i].Unknown {
			// Down refuses such a database (ErrSchemaTooNew): let it say so.
			_, err := e.runner().Down(ctx, pool, 1)
			return exitCode(e, prefix, err)
		}
		if st[i].Applied {
			applied = append(applied, known[st[i].Version])
		}
	}
	if len(applied) == 0 {
		fmt.Fprintln(e.stdout, "nothing to roll back")
		return exitOK
	}
	plan := applied[:min(steps, len(applied))]
	if steps > len(applied) {
		fmt.Fprintf(e.stdout, "-steps %d, but only %d migration(s) are applied: this reverts all of them, leaving no Tenure table.\n", steps, len(applied))
	}
	fmt.Fprintf(e.stdout, "This reverts %d migration(s), newest first:\n", len(plan))
	var tables []string
	for _, m := range plan {
		fmt.Fprintf(e.stdout, "  %04d_%s\n", m.Version, m.Name)
		tables = append(tables, droppedTables(m.Down)...)
	}
	if len(tables) > 0 {
		fmt.Fprintf(e.stdout, "It drops these tables and every row in them: %s.\n", strings.Join(tables, ", "))
	}
	if !yes {
		if !e.interactive() {
			return exitCode(e, prefix, usageErrorf("not reverting without confirmation: stdin is not a terminal; pass -yes to revert anyway"))
		}
		fmt.Fprint(e.stderr, "Type yes to revert them: ")
		answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if strings.TrimSpace(answer) != "yes" {
			fmt.Fprintln(e.stderr, "not confirmed: nothing reverted")
			return exitFail
		}
	}
	reverted, err := e.runner().Down(ctx, pool, len(plan))
	for _, m := range reverted {
		fmt.Fprintf(e.stdout, "reverted %04d_%s\n", m.Version, m.Name)
	}
	if err != nil {
		return exitCode(e, prefix, err)
	}
	for i, m := range reverted {
		if i >= len(plan) || plan[i].Version != m.Version {
			fmt.Fprintln(e.stderr, "warning: the migrations changed while waiting for the confirmation: the ones reverted are listed above")
			break
		}
	}
	return exitOK
}

var dropTableRE = regexp.MustCompile(`(?i)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([A-Za-z0-9_."]+(?:\s*,\s*[A-Za-z0-9_."]+)*)`)

// droppedTables lists the tables a down migration's SQL drops.
func droppedTables(sql string) []string {
	var out []string
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		for _, m := range dropTableRE.FindAllStringSubmatch(line, -1) {
			for _, t := range strings.Split(m[1], ",") {
				out = append(out, strings.TrimSpace(t))
			}
		}
	}
	return out
}

func printStatus(e *env, st []migrations.MigrationStatus) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATUS\tAPPLIED AT")
	unknown := 0
	for _, s := range st {
		state, at := "pending", "-"
		if s.Applied {
			state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
		}
		if s.Unknown {
			state = "UNKNOWN"
			unknown++
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s\n", s.Version, esc(s.Name), state, at)
	}
	tw.Flush()
	if unknown > 0 {
		fmt.Fprintf(e.stderr, "warning: %d applied migration(s) unknown to this binary: %v\n", unknown, migrations.ErrSchemaTooNew)
	}
}
