package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

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
  down     roll back the most recent migration(s): -steps N (default 1)
  status   list the migrations and whether each is applied

Migrations run one per transaction under an advisory lock, so several instances may run
"migrate up" at once. A database migrated by a newer tenure is refused (exit code 1).`

func runMigrate(ctx context.Context, e *env, args []string) int {
	// Flags may come before the action too: tenure migrate -database-url URL up
	fs := newFlagSet(e, "migrate", migrateUsage)
	dbURL := databaseFlag(fs)
	steps := fs.Int("steps", 1, "(down) number of migrations to roll back")
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
	stepsSet := false
	fs.Visit(func(f *flag.Flag) { stepsSet = stepsSet || f.Name == "steps" })
	if stepsSet && action != "down" {
		fmt.Fprintf(e.stderr, "tenure migrate %s: -steps only applies to down\n", action)
		return exitUsage
	}
	if *steps < 1 {
		fmt.Fprintf(e.stderr, "tenure migrate down: -steps must be at least 1, got %d\n", *steps)
		return exitUsage
	}
	url, err := databaseURL(e, *dbURL)
	if err != nil {
		return exitCode(e, "tenure migrate", err)
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return exitCode(e, "tenure migrate", err)
	}
	defer pool.Close()

	prefix := "tenure migrate " + action
	switch action {
	case "up":
		applied, err := migrations.Up(ctx, pool)
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
		reverted, err := migrations.Down(ctx, pool, *steps)
		for _, m := range reverted {
			fmt.Fprintf(e.stdout, "reverted %04d_%s\n", m.Version, m.Name)
		}
		if err != nil {
			return exitCode(e, prefix, err)
		}
		if len(reverted) == 0 {
			fmt.Fprintln(e.stdout, "nothing to roll back")
		}
	case "status":
		st, err := migrations.Status(ctx, pool)
		if err != nil {
			return exitCode(e, prefix, err)
		}
		printStatus(e, st)
	}
	return exitOK
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
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
	}
	tw.Flush()
	if unknown > 0 {
		fmt.Fprintf(e.stderr, "warning: %d applied migration(s) unknown to this binary: %v\n", unknown, migrations.ErrSchemaTooNew)
	}
}
