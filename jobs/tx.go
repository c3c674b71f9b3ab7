package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Tx is the caller's transaction InsertTx and InsertManyTx enqueue in: the three methods of
// pgx's query interface. A pgx.Tx is a Tx as is; SQLTx adapts a database/sql transaction.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLTx adapts a database/sql transaction to a Tx, so jobs can be enqueued in the same
// transaction as an application's writes made through database/sql (sqlx, GORM, ent, bun).
// The *sql.DB must be opened with pgx's database/sql driver (import
// github.com/jackc/pgx/v5/stdlib; sql.Open("pgx", url)), which takes this package's pgx-native
// arguments as they are; other drivers are not supported. The jobs commit or roll back with tx.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{tx: tx} }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag(fmt.Sprintf("EXEC %d", n)), nil
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{rows: rows}, nil
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, query, args...)
	return sqlRow{rows: rows, err: err}
}

// sqlRow is QueryRow's row: the first row of its query, pgx.ErrNoRows when there is none.
type sqlRow struct {
	rows pgx.Rows
	err  error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close() // reads the statement's end: an error after the row counts
	return r.rows.Err()
}

// sqlRows is a *sql.Rows as pgx.Rows, for the generated queries' Next/Scan/Err/Close loop.
type sqlRows struct {
	rows *sql.Rows
	err  error
	m    *pgtype.Map
}

func (r *sqlRows) Close()                        { _ = r.rows.Close() }
func (r *sqlRows) CommandTag() pgconn.CommandTag { return pgconn.CommandTag{} }
func (r *sqlRows) Conn() *pgx.Conn               { return nil }
func (r *sqlRows) Next() bool                    { return r.err == nil && r.rows.Next() }
func (r *sqlRows) RawValues() [][]byte           { return nil }

func (r *sqlRows) TypeMap() *pgtype.Map {
	if r.m == nil {
		r.m = pgtype.NewMap()
	}
	return r.m
}

func (r *sqlRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.rows.Err()
}

func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return nil }

func (r *sqlRows) Values() ([]any, error) {
	return nil, errors.New("tenure: Values is not supported on a database/sql transaction")
}

// Scan scans with database/sql's conversions, except into destinations it cannot fill
// (slices other than []byte, such as a text[] column's []string), which pgx's type map scans
// from the text form pgx's driver hands database/sql.
func (r *sqlRows) Scan(dest ...any) error {
	var wrapped []any // dest with the destinations database/sql cannot fill wrapped; nil: none
	for i, d := range dest {
		if !needsPgtype(d) {
			continue
		}
		if wrapped == nil {
			wrapped = slices.Clone(dest)
		}
		wrapped[i] = r.TypeMap().SQLScanner(d)
	}
	if wrapped == nil {
		wrapped = dest
	}
	if err := r.rows.Scan(wrapped...); err != nil {
		r.err = err
		return err
	}
	return nil
}

// needsPgtype reports whether d points (through any pointers) to a value database/sql's
// conversions do not handle: a slice other than []byte, a map, or a struct or array that is not
// an sql.Scanner.
func needsPgtype(d any) bool {
	t := reflect.TypeOf(d)
	for t != nil && t.Kind() == reflect.Pointer {
		if t.Implements(scannerType) {
			return false
		}
		t = t.Elem()
	}
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8
	case reflect.Map:
		return true
	case reflect.Struct, reflect.Array:
		return t != timeType && !reflect.PointerTo(t).Implements(scannerType)
	}
	return false
}

var (
	scannerType = reflect.TypeFor[sql.Scanner]()
	timeType    = reflect.TypeFor[time.Time]()
)
