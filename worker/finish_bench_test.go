package worker_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/pgtest"
)

// BenchmarkFinishCompleteMany measures the engine's batched fenced success (CompleteMany, 16
// jobs a statement, as a busy finisher writes them) per job: "plain" jobs nobody waits for
// (what every job paid before workflows, and must still pay: the trigger's WHEN is false on
// has_dependents), and "released" jobs that each release one waiting dependent in the same
// statement (the trigger's cost). b.N is the number of jobs finished.
//
//	go test -run XXX -bench 'FinishCompleteMany' -benchtime 20000x -count 5 ./worker/
func BenchmarkFinishCompleteMany(b *testing.B) {
	for _, mode := range []string{"plain", "released"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.NewPool(b)
			const batch = 16
			ins := `INSERT INTO tenure.jobs (kind, payload, state, claim_token, locked_until, locked_by, attempted_at, attempts, generation)
				SELECT 'noop', '{}', 'running', gen_random_uuid(), now() + interval '1 hour', 'w', now(), 1, 1 FROM generate_series(1, $1)`
			_, err := pool.Exec(ctx, ins, b.N)
			require.NoError(b, err)
			if mode == "released" {
				_, err = pool.Exec(ctx, `
					WITH deps AS (SELECT id FROM tenure.jobs ORDER BY id),
					     w AS (INSERT INTO tenure.jobs (kind, payload, state, deps_pending)
					           SELECT 'noop', '{}', 'waiting', 1 FROM deps RETURNING id),
					     pairs AS (SELECT d.id AS dep_id, w.id AS job_id
					               FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM deps) d
					               JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM w) w ON w.n = d.n)
					INSERT INTO tenure.job_deps (dep_id, job_id) SELECT dep_id, job_id FROM pairs`)
				require.NoError(b, err)
				_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET has_dependents = true WHERE state = 'running'`)
				require.NoError(b, err)
			}
			_, err = pool.Exec(ctx, "VACUUM ANALYZE tenure.jobs")
			require.NoError(b, err)
			rows, err := pool.Query(ctx, "SELECT id, claim_token FROM tenure.jobs WHERE state = 'running' ORDER BY id")
			require.NoError(b, err)
			type owned struct {
				ID    int64
				Token uuid.UUID
			}
			all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[owned])
			require.NoError(b, err)
			require.Len(b, all, b.N)
			q := gen.New(pool)
			outputs := make([][]byte, batch)
			for i := range outputs {
				outputs[i] = []byte("null")
			}
			b.ResetTimer()
			for i := 0; i < len(all); i += batch {
				end := min(i+batch, len(all))
				ids, tokens := make([]int64, 0, batch), make([]uuid.UUID, 0, batch)
				for _, o := range all[i:end] {
					ids, tokens = append(ids, o.ID), append(tokens, o.Token)
				}
				got, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: ids, Tokens: tokens, Outputs: outputs[:end-i]})
				if err != nil || len(got) != end-i {
					b.Fatalf("finish: %v (%d rows)", err, len(got))
				}
			}
			b.StopTimer()
			if mode == "released" {
				var waiting int
				require.NoError(b, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE state::text = 'waiting'").Scan(&waiting))
				require.Zero(b, waiting, "every dependent released")
			}
		})
	}
}
