package migrations

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/internal/dbschema"
)

// Hint is what to do about a database whose Tenure schema is missing or behind: the advice
// every error wrapping ErrNotMigrated carries, so the library, the worker and every CLI command
// give the same one.
const Hint = "run `tenure migrate up` or call migrations.Up(ctx, pool)"

// ErrNotMigrated means the database lacks Tenure's schema, or some of the migrations this
// release needs: it was never migrated, or migrated by an older release. The error is a
// *NotMigratedError, whose message carries Hint. Check reports it before any work;
// WrapNotMigrated recognizes it in the error of a statement that found a Tenure table or
// function missing. Test for it with errors.Is.
var ErrNotMigrated = errors.New("tenure: database schema not migrated")

// NotMigratedError is the error wrapping ErrNotMigrated. It unwraps to ErrNotMigrated and to
// the database error that revealed it, if any (errors.As finds the *pgconn.PgError).
type NotMigratedError struct {
	// Pending lists the versions this release needs that are not applied, ascending, when
	// the version table was read (Check); nil when the error was inferred from a missing
	// table or function (WrapNotMigrated).
	Pending []int
	// Latest is the highest version this release knows.
	Latest int
	// Err is the statement's error that found a Tenure object missing (WrapNotMigrated);
	// nil from Check.
	Err error
}

// Error names what is missing and carries Hint.
func (e *NotMigratedError) Error() string {
	var what string
	switch {
	case e.Err != nil:
		what = fmt.Sprintf(" (%v)", e.Err)
	case len(e.Pending) > 0 && len(e.Pending) == len(All()):
		what = fmt.Sprintf(": no migration applied (this release needs version %d)", e.Latest)
	case len(e.Pending) > 0:
		vs := make([]string, len(e.Pending))
		for i, v := range e.Pending {
			vs[i] = strconv.Itoa(v)
		}
		what = fmt.Sprintf(": migration(s) %s not applied (this release needs version %d)", strings.Join(vs, ", "), e.Latest)
	}
	return fmt.Sprintf("%v%s: %s", ErrNotMigrated, what, Hint)
}

// Unwrap returns ErrNotMigrated and Err.
func (e *NotMigratedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotMigrated}
	}
	return []error{ErrNotMigrated, e.Err}
}

// SQLSTATEs of a statement that named a table, function, type or schema that does not
// exist.
const (
	sqlstateUndefinedTable    = "42P01"
	sqlstateUndefinedFunction = "42883"
	sqlstateUndefinedObject   = "42704"
	sqlstateInvalidSchemaName = "3F000"
)

// IsMissingSchemaObject reports whether err (or an error it wraps) is PostgreSQL's answer to a
// statement naming a Tenure table, function, type or Tenure's schema itself (the default
// schema, or one a Runner, jobs.Client or worker.Worker of this process was configured with)
// that does not exist (SQLSTATE 42P01 undefined_table, 42883 undefined_function, 42704 undefined_object or
// 3F000 invalid_schema_name, with the tenure schema in the message): the signature of a
// database that was never migrated, or is behind this release.
func IsMissingSchemaObject(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case sqlstateUndefinedTable, sqlstateUndefinedFunction, sqlstateUndefinedObject, sqlstateInvalidSchemaName:
	default:
		return false
	}
	if pe.SchemaName != "" && dbschema.IsKnown(pe.SchemaName) {
		return true
	}
	for _, m := range schemaInMessageRE.FindAllStringSubmatch(pe.Message, -1) {
		if dbschema.IsKnown(m[1]) || dbschema.IsKnown(m[2]) {
			return true
		}
	}
	return false
}

// schemaInMessageRE finds the schema a PostgreSQL message names: "schema.object" (relation
// "tenure.jobs", function tenure.enqueue(...)) or a quoted name (schema "tenure").
var schemaInMessageRE = regexp.MustCompile(`([a-z_][a-z0-9_]*)\.|"([a-z_][a-z0-9_]*)"`)

// Check is Runner.Check on the default schema.
func Check(ctx context.Context, pool *pgxpool.Pool) error { return defaultRunner.Check(ctx, pool) }

// WrapNotMigrated returns err as a *NotMigratedError (errors.Is ErrNotMigrated, message with
// Hint) when IsMissingSchemaObject(err), and err unchanged otherwise (nil stays nil). Callers
// apply it to the errors of statements on Tenure's schema, so that an unmigrated database
// says what to do instead of `relation "tenure.jobs" does not exist`.
func WrapNotMigrated(err error) error {
	if err == nil || errors.Is(err, ErrNotMigrated) || !IsMissingSchemaObject(err) {
		return err
	}
	return &NotMigratedError{Latest: Latest(), Err: err}
}

// Check reads the applied versions (Status: no lock, creates nothing) and returns nil when
// every migration this release knows is applied, a *NotMigratedError (ErrNotMigrated) listing
// the pending versions when some are not, and a *SchemaTooNewError (ErrSchemaTooNew) when the
// database has versions applied that this release does not know. Tools call it at start
// (tenure serve does) to refuse an unusable database with the one hint, instead of failing
// at the first statement.
func (r *Runner) Check(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := r.Status(ctx, pool)
	if err != nil {
		return err
	}
	return checkStatus(st)
}

func checkStatus(st []MigrationStatus) error {
	var pending, unknown []int
	for _, s := range st {
		switch {
		case s.Unknown:
			unknown = append(unknown, s.Version)
		case !s.Applied:
			pending = append(pending, s.Version)
		}
	}
	if len(unknown) > 0 {
		return &SchemaTooNewError{Unknown: unknown, Latest: Latest()}
	}
	if len(pending) > 0 {
		return &NotMigratedError{Pending: pending, Latest: Latest()}
	}
	return nil
}
