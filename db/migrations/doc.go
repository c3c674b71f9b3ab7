// Package migrations holds Tenure's numbered SQL migrations and the runner that applies them.
//
// The migrations are embedded in the binary: files named NNNN_name.up.sql and
// NNNN_name.down.sql in this directory, where NNNN is a positive version number. Applying
// every up migration in order produces exactly db/schema.sql (a test compares the catalogs).
//
// Up applies the pending migrations, Down rolls back the most recent ones and Status reports
// which are applied. Each migration runs in its own transaction together with the row that
// records it in tenure.schema_migrations, so a failed migration leaves nothing behind.
//
// Several application instances may call Up at the same time: the runner holds the
// session-level advisory lock LockKey on one dedicated connection for the whole run, and only
// reads the applied versions after it got the lock, so each migration is applied exactly once.
//
// The runner creates schema "tenure" and the version table when they are missing. Migrating
// down to zero leaves them in place (empty), and nothing else of Tenure's.
//
// Another schema: NewRunner(Options{Schema: "billing_jobs"}) returns a Runner whose Up, Down,
// Status and Check (and the Conn variants) apply the same migrations, their text rewritten for
// that schema (every identifier naming schema tenure, and nothing else), with that schema's
// version table and advisory lock key; the package functions are the Runner of "tenure". Two
// schemas in one database are migrated, and reverted, independently. An invalid name is
// refused with an *InvalidSchemaError (ErrInvalidSchema).
//
// A database on which a version is applied that this binary does not know (typically because
// a newer release already migrated it) is refused with ErrSchemaTooNew by Up and Down;
// Status reports such versions with Unknown set.
//
// A database without the schema, or behind this binary, is reported one way everywhere:
// ErrNotMigrated, whose message carries Hint ("run `tenure migrate up` or call
// migrations.Up(ctx, pool)"). Check returns it before any work; WrapNotMigrated turns a
// statement's "tenure table or function does not exist" error into it.
//
// The functions taking a *pgxpool.Pool acquire one connection for the run; the *Conn variants
// work on a connection the caller owns, for tools and tests that use a plain *pgx.Conn.
package migrations
