package main

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

// The -json schema, pinned: every key path of each command's output ("[]" marks a list's
// elements). Renaming or removing a field fails TestJSONSchema; that is a breaking change for
// the scripts reading it, to be made on purpose (and documented in doc.go), not by accident.
var (
	jobKeys = []string{"id", "queue", "kind", "payload", "payload_version", "state", "priority", "run_at",
		"attempts", "max_attempts", "lease_seconds", "locked_by", "locked_until", "claim_token", "generation",
		"attempted_at", "last_error_code", "errors", "errors[].attempt", "errors[].generation", "errors[].code",
		"errors[].message", "errors[].at", "created_at", "updated_at", "finished_at", "cancel_requested_at",
		"metadata", "tags", "output", "snoozes", "unique_key", "unique_states",
		"workflow_id", "task_name", "sequence_key", "deps_pending",
		"progress", "elapsed_seconds", "timeout_seconds", "errors[].output", "errors[].progress"}
	statsKeys = []string{"window_seconds", "bands", "bands[].queue", "bands[].priority", "bands[].ready",
		"bands[].scheduled", "bands[].running", "bands[].cancel_requested", "bands[].dead",
		"bands[].oldest_ready_age_seconds", "bands[].ready_age_p50_seconds", "bands[].ready_age_p95_seconds",
		"bands[].finished", "bands[].succeeded", "bands[].wait_p50_seconds", "bands[].wait_p95_seconds",
		"bands[].wait_p99_seconds", "bands[].queue_served", "bands[].unserved_jobs", "top_dead_codes", "top_dead_codes[].queue", "top_dead_codes[].kind",
		"top_dead_codes[].code", "top_dead_codes[].jobs", "unserved", "unserved[].queue", "unserved[].ready",
		"unserved[].oldest_ready_age_seconds", "unserved_kinds", "unserved_kinds[].queue", "unserved_kinds[].kind",
		"unserved_kinds[].ready", "unserved_kinds[].queue_served", "unserved_kinds[].kind_registered",
		"delete_on_success_kinds"}
)

func listKeys() []string {
	out := []string{"jobs", "next_after_id"}
	for _, k := range jobKeys {
		out = append(out, "jobs[]."+k)
	}
	return out
}

// keyPaths lists the key paths of a decoded JSON value (not inside a job's payload, output or
// metadata, whose keys are the application's).
func keyPaths(v any, prefix string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			if k != "payload" && k != "output" && k != "metadata" { // the user's data, not the schema
				keyPaths(e, p, out)
			}
		}
	case []any:
		for _, e := range v {
			keyPaths(e, prefix+"[]", out)
		}
	}
}

func sortedKeys(t *testing.T, doc string) (map[string]any, []string) {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(doc), &v), doc)
	set := map[string]bool{}
	keyPaths(v, "", set)
	var ks []string
	for k := range set {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return v, ks
}

func sorted(ks []string) []string { ks = slices.Clone(ks); sort.Strings(ks); return ks }

// TestJSONSchema pins the -json output of jobs list, get and stats: snake_case keys, every
// field present (null when empty), times RFC 3339 in UTC, durations in seconds.
func TestJSONSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var rich, plain int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM tenure.enqueue('mail', '{"to":"a@b.c"}', queue => 'mail', tags => ARRAY['vip'], unique_args => '{}', metadata => '{"m":"v"}', lease_ms => 45000)`).Scan(&rich))
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'running', attempts = 1, generation = 1, claim_token = gen_random_uuid(), attempted_at = now(),
		locked_by = 'w1', locked_until = now() + interval '1 minute', last_error_code = 'BOOM',
		errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'generation', 1, 'code', 'BOOM', 'message', 'm', 'at', now())) WHERE id = $1`, rich)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
		VALUES ('mail', 'mail', '{}', 'dead', 3, 3, gen_random_uuid(), 3, now(), now(), 'TIMEOUT') RETURNING id`).Scan(&plain))
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, run_at) VALUES ('lost', 'k', '{}', now() - interval '10 minutes')`)
	require.NoError(t, err)

	r := tenure(t, url, "jobs", "get", itoa(rich), "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc, ks := sortedKeys(t, r.stdout)
	require.Equal(t, sorted(jobKeys), ks)
	require.Equal(t, 45.0, doc["lease_seconds"], "durations are seconds")
	require.Equal(t, "w1", doc["locked_by"])
	require.Equal(t, []any{"vip"}, doc["tags"])
	require.Equal(t, map[string]any{"m": "v"}, doc["metadata"])
	require.Equal(t, map[string]any{"to": "a@b.c"}, doc["payload"], "the payload is JSON, not a string")
	require.Regexp(t, `^[0-9a-f]{64}$`, doc["unique_key"])
	for _, k := range []string{"run_at", "locked_until", "attempted_at", "created_at", "updated_at"} {
		s, ok := doc[k].(string)
		require.True(t, ok, "%s: %v", k, doc[k])
		_, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err, k)
		require.True(t, strings.HasSuffix(s, "Z"), "%s in UTC: %s", k, s)
	}

	// A job with little set: the same keys, nulls and empty lists instead of absent fields.
	r = tenure(t, url, "jobs", "get", itoa(plain), "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc, ks = sortedKeys(t, r.stdout)
	var want []string
	for _, k := range jobKeys {
		if !strings.HasPrefix(k, "errors[].") {
			want = append(want, k)
		}
	}
	require.Equal(t, sorted(want), ks)
	for _, k := range []string{"locked_by", "locked_until", "unique_key", "output", "cancel_requested_at"} {
		require.Nil(t, doc[k], k)
		require.Contains(t, r.stdout, `"`+k+`": null`)
	}
	require.Equal(t, []any{}, doc["tags"])
	require.Equal(t, []any{}, doc["errors"])
	require.Equal(t, map[string]any{}, doc["metadata"])
	require.Equal(t, 30.0, doc["lease_seconds"])

	r = tenure(t, url, "jobs", "list", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc, ks = sortedKeys(t, r.stdout)
	require.Equal(t, sorted(listKeys()), ks)
	require.Nil(t, doc["next_after_id"], "the last page")
	require.Len(t, doc["jobs"], 3)
	r = tenure(t, url, "jobs", "list", "-json", "-limit", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc, _ = sortedKeys(t, r.stdout)
	require.Equal(t, float64(rich), doc["next_after_id"])

	r = tenure(t, url, "jobs", "stats", "-json", "-window", "90s")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc, ks = sortedKeys(t, r.stdout)
	require.Equal(t, sorted(statsKeys), ks)
	require.Equal(t, 90.0, doc["window_seconds"])
	unserved := doc["unserved"].([]any)
	require.Len(t, unserved, 1)
	u := unserved[0].(map[string]any)
	require.Equal(t, "lost", u["queue"])
	require.InDelta(t, 600, u["oldest_ready_age_seconds"], 300, "seconds, not nanoseconds")
}

// TestJSONTypesAreTagged: every field of the -json types has an explicit snake_case name, is
// always present (no omitempty) and is no time.Duration (which would print nanoseconds), so a
// field added later cannot slip in with a Go name.
func TestJSONTypesAreTagged(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, v := range []any{jsonJob{}, jsonAttempt{}, jsonPage{}, jsonStats{}, jsonBand{}, jsonDeadCodes{}, jsonUnserved{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, ok := f.Tag.Lookup("json")
			require.True(t, ok, "%s.%s has no json tag", typ.Name(), f.Name)
			require.Regexp(t, snake, tag, "%s.%s", typ.Name(), f.Name)
			require.NotEqual(t, reflect.TypeOf(time.Duration(0)), f.Type, "%s.%s: durations are float seconds", typ.Name(), f.Name)
			if f.Type.Kind() == reflect.Float64 {
				require.True(t, strings.HasSuffix(tag, "_seconds"), "%s.%s: a float field is a duration named *_seconds", typ.Name(), f.Name)
			}
		}
	}
}
