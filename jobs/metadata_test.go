package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestInsertMetadataRoundTrips stores metadata through Insert, InsertTx and InsertMany and
// reads it back with Get and List; a job without metadata reads back nil.
func TestInsertMetadataRoundTrips(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "request_id": "r-1 ✓", "empty": ""}
	row, err := c.Insert(ctx, kindArgs{"md"}, &jobs.InsertOpts{Metadata: md})
	require.NoError(t, err)
	require.Equal(t, md, row.Job.Metadata)
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, md, got.Metadata)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	txRow, err := c.InsertTx(ctx, tx, kindArgs{"md"}, &jobs.InsertOpts{Metadata: map[string]string{"k": "tx"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	ids, err := c.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: kindArgs{"md"}, Opts: &jobs.InsertOpts{Metadata: map[string]string{"n": "1"}}},
		{Args: kindArgs{"md"}},
		{Args: kindArgs{"md"}, Opts: &jobs.InsertOpts{Metadata: map[string]string{"n": "3"}}},
	})
	require.NoError(t, err)
	page, err := c.List(ctx, jobs.ListParams{Kind: "md"})
	require.NoError(t, err)
	byID := map[int64]map[string]string{}
	for _, r := range page.Jobs {
		byID[r.ID] = r.Metadata
	}
	require.Equal(t, map[string]string{"k": "tx"}, byID[txRow.Job.ID])
	require.Equal(t, map[string]string{"n": "1"}, byID[ids[0].Job.ID])
	require.Nil(t, byID[ids[1].Job.ID])
	require.Equal(t, map[string]string{"n": "3"}, byID[ids[2].Job.ID])
	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT metadata::text FROM tenure.jobs WHERE id = $1`, ids[1].Job.ID).Scan(&stored))
	require.Equal(t, "{}", stored)
}

// TestInsertMetadataRefusedIsTyped checks the metadata bounds: each violation is an
// *OptionError naming Metadata, on Insert and InsertMany, and nothing is written.
func TestInsertMetadataRefusedIsTyped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	many := map[string]string{}
	for i := range jobs.MaxMetadataEntries + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		md   map[string]string
	}{
		{"empty key", map[string]string{"": "v"}},
		{"long key", map[string]string{strings.Repeat("k", jobs.MaxMetadataKeyBytes+1): "v"}},
		{"NUL in key", map[string]string{"a\x00b": "v"}},
		{"invalid UTF-8 key", map[string]string{"a\xffb": "v"}},
		{"NUL in value", map[string]string{"k": "a\x00b"}},
		{"invalid UTF-8 value", map[string]string{"k": "\xc3"}},
		{"too many entries", many},
		{"too large", map[string]string{"k": strings.Repeat("x", jobs.MaxMetadataBytes)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Insert(ctx, kindArgs{"md_bad"}, &jobs.InsertOpts{Metadata: tc.md})
			var oe *jobs.OptionError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, "Metadata", oe.Field)
			require.ErrorIs(t, err, jobs.ErrInvalidOptions)
			_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: kindArgs{"md_bad"}}, {Args: kindArgs{"md_bad"}, Opts: &jobs.InsertOpts{Metadata: tc.md}}})
			require.ErrorAs(t, err, &oe)
			require.Equal(t, "Metadata", oe.Field)
		})
	}
	// The largest accepted metadata fits the database's bound.
	big := map[string]string{"k": strings.Repeat("é", (jobs.MaxMetadataBytes-10)/2)}
	_, err = c.Insert(ctx, kindArgs{"md_big"}, &jobs.InsertOpts{Metadata: big})
	require.NoError(t, err)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE kind = 'md_bad'`).Scan(&n))
	require.Zero(t, n)

	// The database holds its own line: an object of strings, at most 8 KiB.
	for _, bad := range []string{`[]`, `{"n": 1}`, `{"a": "x", "b": {"c": "d"}}`, `"s"`} {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, metadata) VALUES ('raw', '{}', $1::jsonb)`, bad)
		require.ErrorContains(t, err, "jobs_metadata_object", bad)
	}
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, metadata)
		VALUES ('raw', '{}', jsonb_build_object('k', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i)))`)
	require.ErrorContains(t, err, "jobs_metadata_size")
}

// TestBeforeInsertAddsMetadata checks the BeforeInsert seam: it sees the call's context and the
// job's kind, what it adds is stored, and the caller's options and map are left untouched.
func TestBeforeInsertAddsMetadata(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	type ctxKey struct{}
	var calls atomic.Int32
	c, err := jobs.NewClient(pool, &jobs.Config{BeforeInsert: func(ctx context.Context, kind string, o *jobs.InsertOpts) {
		calls.Add(1)
		v, _ := ctx.Value(ctxKey{}).(string)
		if o.Metadata == nil {
			o.Metadata = map[string]string{}
		}
		o.Metadata["from_ctx"] = v
		o.Metadata["kind"] = kind
	}})
	require.NoError(t, err)
	ctx := context.WithValue(context.Background(), ctxKey{}, "req-7")

	mine := map[string]string{"own": "1"}
	opts := &jobs.InsertOpts{Metadata: mine}
	row, err := c.Insert(ctx, kindArgs{"hooked"}, opts)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"own": "1", "from_ctx": "req-7", "kind": "hooked"}, row.Job.Metadata)
	require.Equal(t, map[string]string{"own": "1"}, mine)
	require.Equal(t, &jobs.InsertOpts{Metadata: map[string]string{"own": "1"}}, opts)

	row, err = c.Insert(ctx, kindArgs{"hooked"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"from_ctx": "req-7", "kind": "hooked"}, row.Job.Metadata)

	ids, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: kindArgs{"hooked_a"}}, {Args: kindArgs{"hooked_b"}}})
	require.NoError(t, err)
	require.EqualValues(t, 4, calls.Load())
	for i, id := range ids {
		r, err := c.Get(ctx, id.Job.ID)
		require.NoError(t, err)
		require.Equal(t, []string{"hooked_a", "hooked_b"}[i], r.Metadata["kind"])
	}

	// What the hook adds is validated like the caller's own metadata.
	bad, err := jobs.NewClient(pool, &jobs.Config{BeforeInsert: func(_ context.Context, _ string, o *jobs.InsertOpts) {
		o.Metadata = map[string]string{"k": "\x00"}
	}})
	require.NoError(t, err)
	_, err = bad.Insert(ctx, kindArgs{"hooked"}, nil)
	var oe *jobs.OptionError
	require.True(t, errors.As(err, &oe) && oe.Field == "Metadata", "%v", err)
}

type tenantArgs struct {
	Tenant string `json:"tenant"`
}

func (tenantArgs) Kind() string             { return "tenant_args" }
func (tenantArgs) PayloadVersion() int      { return 1 }
func (a tenantArgs) FairKey() string        { return a.Tenant }
func (a tenantArgs) ConcurrencyKey() string { return "acct-" + a.Tenant }

// TestFairKeyStoredInMetadata: InsertOpts.FairKey (or the args' FairKey method) lands in the
// metadata entry the fair claim and jobs_fair_idx read, next to the concurrency key; the option
// overrides the method; a key that is too long or not UTF-8 is refused with an *OptionError
// naming FairKey and inserts nothing.
func TestFairKeyStoredInMetadata(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	row, err := c.Insert(ctx, tenantArgs{Tenant: "t-1"}, &jobs.InsertOpts{Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": "v", jobs.FairKeyMetadata: "t-1", jobs.ConcurrencyKeyMetadata: "acct-t-1"}, row.Job.Metadata)

	row, err = c.Insert(ctx, tenantArgs{Tenant: "t-1"}, &jobs.InsertOpts{FairKey: "override"})
	require.NoError(t, err)
	require.Equal(t, "override", row.Job.Metadata[jobs.FairKeyMetadata])

	for _, bad := range []string{strings.Repeat("x", jobs.MaxConcurrencyKeyBytes+1), "\xff", "a\x00b"} {
		_, err = c.Insert(ctx, kindArgs{"fk"}, &jobs.InsertOpts{FairKey: bad})
		var oe *jobs.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "FairKey", oe.Field)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE kind = 'fk'`).Scan(&n))
	require.Zero(t, n)
	// keyed ready jobs enter the fair index; the others do not
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND (metadata ->> 'tenure.fair_key') IS NOT NULL`).Scan(&n))
	require.Equal(t, 2, n)
}
