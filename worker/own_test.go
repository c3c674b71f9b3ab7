package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/pgtest"
)

// TestOwnOwnsOnlyReadyRows: tenure.own (migration 0019), the one ownership statement every
// claim feeds its picked ids into, owns a row only while it is ready: given the id of a
// running job (or of a finished one) it returns nothing and leaves the owner's token,
// generation, lease and attempt count as they were, so a job cannot be owned twice whatever
// a claim statement passes it.
func TestOwnOwnsOnlyReadyRows(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var running, done, ready int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('noop', '{}') RETURNING id`).Scan(&running))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, state, finished_at) VALUES ('noop', '{}', 'succeeded', now()) RETURNING id`).Scan(&done))
	got, err := gen.New(pool).ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: "owner", Queue: "default", Batch: 1,
		Kinds: []string{"noop"}, KindVersions: []int32{1}, KindLeaseMs: []int32{0}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NotNil(t, got[0].ID)
	require.Equal(t, running, *got[0].ID)
	require.Nil(t, got[0].Feedback, "a plain claim has no feedback")
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('noop', '{}') RETURNING id`).Scan(&ready))

	type owned struct {
		token      *uuid.UUID
		generation int64
		attempts   int32
		lockedBy   *string
	}
	read := func(id int64) (o owned) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT claim_token, generation, attempts, locked_by FROM tenure.jobs WHERE id = $1`, id).
			Scan(&o.token, &o.generation, &o.attempts, &o.lockedBy))
		return o
	}
	before, beforeDone := read(running), read(done)

	own := func(id int64) (ids []int64) {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT id FROM tenure.own(ARRAY[$1]::bigint[], 'intruder', '{noop}', '{0}')`, id)
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		return ids
	}
	require.Empty(t, own(running), "tenure.own owned a running job")
	require.Empty(t, own(done), "tenure.own owned a finished job")
	require.Equal(t, []int64{ready}, own(ready))
	require.Equal(t, before, read(running), "the running job's ownership changed")
	require.Equal(t, "owner", *read(running).lockedBy)
	require.Equal(t, beforeDone, read(done), "the finished job changed")
}

// TestOwnVariants: what tenure.own writes, and the variants the claims use: the lease per kind
// (0 = the job's stored lease), limited left as is (NULL), cleared ('{}': grant claims) or set
// for the kinds listed (” = every kind: limited and permit claims), attempted_at given (the
// limited claim's rate clock) or now().
func TestOwnVariants(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	insert := func(kind string, limited bool) (id int64) {
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, lease_ms, limited) VALUES ($1, '{}', 45000, $2) RETURNING id`,
			kind, limited).Scan(&id))
		return id
	}
	type res struct {
		limited              bool
		leaseMs, attempts    int32
		generation           int64
		leaseLeft            time.Duration
		lockedBy             string
		attemptedAt, started time.Time
		after                time.Time
	}
	own := func(id int64, limitKinds []string, at *time.Time) (r res) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT o.limited, o.lease_ms, o.attempts, o.generation,
			       (extract(epoch FROM o.locked_until - o.attempted_at) * 1e6)::bigint * interval '1 microsecond', o.locked_by, o.attempted_at, now(),
			       clock_timestamp()
			FROM tenure.own(ARRAY[$1::bigint], 'w1', '{a,b}', '{5000,0}', $2::text[], $3::timestamptz) o`, id, limitKinds, at).
			Scan(&r.limited, &r.leaseMs, &r.attempts, &r.generation, &r.leaseLeft, &r.lockedBy, &r.attemptedAt, &r.started, &r.after))
		return r
	}

	r := own(insert("a", true), nil, nil)
	require.True(t, r.limited, "NULL limit_kinds must leave the mark as it is")
	require.EqualValues(t, 5000, r.leaseMs, "the worker's lease for kind a")
	require.Equal(t, 5*time.Second, r.leaseLeft)
	require.EqualValues(t, 1, r.attempts)
	require.EqualValues(t, 1, r.generation)
	require.Equal(t, "w1", r.lockedBy)
	// The claim's clock (migration 0025): read as own starts, within the statement, not the
	// transaction's start; the lease counts from it (leaseLeft is locked_until - attempted_at).
	require.False(t, r.attemptedAt.Before(r.started), "attempted_at defaults to the claim's clock, not before the transaction began")
	require.False(t, r.attemptedAt.After(r.after), "attempted_at defaults to the claim's clock, read before the statement returned")

	r = own(insert("b", false), nil, nil)
	require.False(t, r.limited)
	require.EqualValues(t, 45000, r.leaseMs, "kind_lease_ms 0 keeps the job's lease")

	require.False(t, own(insert("a", true), []string{}, nil).limited, "'{}' clears the mark")
	require.True(t, own(insert("a", false), []string{"a"}, nil).limited, "a listed kind is marked")
	require.False(t, own(insert("b", false), []string{"a"}, nil).limited, "an unlisted kind is not")
	require.True(t, own(insert("b", false), []string{""}, nil).limited, "'' covers every kind")

	at := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	require.True(t, at.Equal(own(insert("a", false), nil, &at).attemptedAt), "attempted_at as given")
}

// TestOwnUnderRoles: tenure.own runs with its caller's privileges (SECURITY INVOKER): the
// worker role (tenure.grant_worker) owns through it, a role without UPDATE on tenure.jobs
// (tenure.grant_enqueuer) is refused and owns nothing.
func TestOwnUnderRoles(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	wp := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')"), 1)
	ep := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_enqueuer('{role}')"), 1)
	var id, owned int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload) VALUES ('noop', '{}') RETURNING id`).Scan(&id))
	_, err := ep.Exec(ctx, `SELECT * FROM tenure.own(ARRAY[$1]::bigint[], 'enqueuer', '{noop}', '{0}')`, id)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "an enqueuer must not own a job through tenure.own")
	require.NoError(t, wp.QueryRow(ctx, `SELECT id FROM tenure.own(ARRAY[$1]::bigint[], 'worker', '{noop}', '{0}')`, id).Scan(&owned))
	require.Equal(t, id, owned)
}

// TestOwnTokensAreFreshPerAttempt: tenure.own derives the claim tokens of one call from one
// random uuid and each row's id (migration 0030). Every token of a call is distinct, every
// attempt of a job gets a token none of its earlier attempts had, tokens stay RFC 4122
// version 4 uuids, and a finish fenced by an earlier attempt's token changes nothing.
func TestOwnTokensAreFreshPerAttempt(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) SELECT 'noop', '{}' FROM generate_series(1, 200)`)
	require.NoError(t, err)
	seen := map[uuid.UUID]int64{}
	tokensOf := map[int64][]uuid.UUID{}
	for attempt := 0; attempt < 5; attempt++ {
		rows, err := pool.Query(ctx, `SELECT id, claim_token FROM tenure.own(ARRAY(SELECT id FROM tenure.jobs WHERE state = 'ready'), 'w', '{noop}', '{0}')`)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			var id int64
			var tok uuid.UUID
			require.NoError(t, rows.Scan(&id, &tok))
			n++
			require.Equal(t, uuid.Version(4), tok.Version(), "token %s", tok)
			require.Equal(t, uuid.RFC4122, tok.Variant(), "token %s", tok)
			if other, dup := seen[tok]; dup {
				t.Fatalf("token %s given to job %d and before to job %d", tok, id, other)
			}
			seen[tok] = id
			tokensOf[id] = append(tokensOf[id], tok)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 200, n)
		// back to ready (as a release would) for the next attempt
		_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'ready', claim_token = NULL, locked_by = NULL, locked_until = NULL`)
		require.NoError(t, err)
	}
	require.Len(t, seen, 1000)
	// the last attempt owns the job; a finish with an earlier attempt's token is refused
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(id) FROM tenure.jobs`).Scan(&id))
	var last uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT claim_token FROM tenure.own(ARRAY[$1]::bigint[], 'w', '{noop}', '{0}')`, id).Scan(&last))
	q := gen.New(pool)
	for _, old := range tokensOf[id] {
		got, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{id}, Tokens: []uuid.UUID{old}, Outputs: [][]byte{[]byte("null")}})
		require.NoError(t, err)
		require.Empty(t, got, "a finish fenced by an earlier attempt's token landed")
	}
	got, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{id}, Tokens: []uuid.UUID{last}, Outputs: [][]byte{[]byte("null")}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.False(t, got[0].Busy)
}
