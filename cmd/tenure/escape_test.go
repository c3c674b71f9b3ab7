package main

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

// terminalSafe fails unless s is valid UTF-8 holding no control character but the CLI's own
// newlines (and tabs), no DEL, no C1 control and no bidi control.
func terminalSafe(t *testing.T, what, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "%s: invalid UTF-8: %q", what, s)
	for i, r := range s {
		bad := (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) ||
			r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) ||
			r == 0x2028 || r == 0x2029
		require.False(t, bad, "%s: %U at byte %d: %q", what, r, i, s)
	}
}

// FuzzEsc: whatever a value holds, esc's result is safe on a terminal (no byte below 0x20 at
// all, not even a tab or newline, so a value cannot break a row or a column), and a value
// without anything to escape comes back unchanged.
func FuzzEsc(f *testing.F) {
	for _, s := range []string{"", "plain kind", "mail.send", "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "a\tb\nc\rd",
		"\x00\x7f", "\u009b31m", "\u0085", "\u202eevil\u202c", "\u2066x\u2069", "\u200f", "\u061c", "\u2028\u2029",
		"\xff\xfe", "\xc3", "\xe2\x80", "é ü 日本 🙂", "\ufffd", `back\slash \x1b`, "\xed\xa0\x80", "\xc0\xaf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := esc(s)
		terminalSafe(t, "esc", out)
		require.NotContains(t, out, "\n")
		require.NotContains(t, out, "\t")
		clean := utf8.ValidString(s)
		for _, r := range s {
			clean = clean && !needsEscape(r, utf8.RuneLen(r))
		}
		if clean {
			require.Equal(t, s, out)
		} else {
			require.NotEqual(t, s, out)
		}
	})
}

// TestOutputEscapesDatabaseValues: values from the database holding ESC sequences, C1
// controls, bidi overrides, newlines and invalid UTF-8 (in a job's queue, kind, payload, error
// history, metadata, owner; an audit actor and reason; a worker's id and host; a periodic
// schedule; a queue's pause reason) are printed escaped by every human-readable command,
// never raw.
func TestOutputEscapesDatabaseValues(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	const evil = "x\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eevil\nforged\tcol"
	var ready, running int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, metadata, run_at)
		VALUES ('q'||$1, 'k'||$1, jsonb_build_object('to', $1::text), jsonb_build_object('m', $1::text), now() - interval '1 hour') RETURNING id`, evil).Scan(&ready))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, claim_token, generation, attempted_at, locked_by, locked_until, errors)
		VALUES ('q'||$1, 'k'||$1, '{}', 'running', 1, gen_random_uuid(), 1, now(), 'w'||$1, now() + interval '1 minute',
		jsonb_build_array(jsonb_build_object('attempt', 1, 'generation', 1, 'code', 'BOOM', 'message', 'm'||$1, 'at', now()))) RETURNING id`, evil).Scan(&running))
	_, err = pool.Exec(ctx, `INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, counters)
		VALUES ('w'||$1, 'h'||$1, 1, 'v'||$1, jsonb_build_object('q'||$1, jsonb_build_object('concurrency', 1)), now(), now(), now() + interval '1 minute', '{}')`, evil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.periodic (name, spec, kind, queue, next_run_at) VALUES ('p'||$1, 's'||$1, 'k'||$1, 'q'||$1, now() + interval '1 hour')`, evil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.queues (name, paused, paused_at, updated_by, reason) VALUES ('q'||$1, true, now(), 'a'||$1, 'r'||$1)`, evil)
	require.NoError(t, err)
	r := tenure(t, url, "jobs", "cancel", itoa(ready), "-actor", "ops"+evil, "-reason", "why"+evil)
	require.Equal(t, exitOK, r.code, r.stderr)

	for _, args := range [][]string{
		{"jobs", "list"},
		{"jobs", "get", itoa(ready)},
		{"jobs", "get", itoa(running)},
		{"jobs", "audit"},
		{"jobs", "audit", itoa(ready)},
		{"jobs", "stats"},
		{"jobs", "list", "-kind", "k" + evil}, // a filter echoing the value
		{"queue", "list"},
		{"workers"},
		{"periodic", "list"},
		{"jobs", "get", "999999"},
	} {
		r := tenure(t, url, args...)
		terminalSafe(t, strings.Join(args, " ")+" stdout", r.stdout)
		terminalSafe(t, strings.Join(args, " ")+" stderr", r.stderr)
		if r.code == exitOK {
			require.Contains(t, r.stdout, `\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eevil\nforged\tcol`, "%v shows the value, escaped", args)
		}
	}
}
