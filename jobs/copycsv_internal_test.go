package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
)

// hostileCSVRows are rows whose text is everything CSV and array literals treat specially:
// delimiters, quotes, backslashes, newlines and carriage returns, COPY's end-of-data line "\.",
// the word NULL, braces, empty strings, multi-byte UTF-8, and one value longer than a Read.
func hostileCSVRows(t *testing.T) ([]prepared, []time.Time) {
	texts := []string{"", "a,b", `"quoted"`, `""`, "line1\nline2", "\\.", "\n\\.\n", "back\\slash", "{braces}", "NULL", "null",
		"tab\there", "cr\r\nlf", "é漢字🙂", " lead and trail ", `{"a","b"}`, string(bytes.Repeat([]byte(`x",`), 30000))}
	var all []prepared
	var runAts []time.Time
	base := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.FixedZone("odd", -(7*3600+30*60)))
	for i, s := range texts {
		payload, err := json.Marshal(map[string]any{"s": s, "i": i})
		require.NoError(t, err)
		meta, err := json.Marshal(map[string]string{s + "k": s})
		require.NoError(t, err)
		all = append(all, prepared{queue: "q" + s, kind: "k" + s, payload: payload, version: int32(i + 1), priority: int16(1 + i%4),
			maxAttempts: int32(1 + i), leaseMs: int32(1000 * (i + 1)), metadata: meta, tags: []string{s, "t" + s, `\`}})
		runAts = append(runAts, base.Add(time.Duration(i)*time.Hour))
	}
	all = append(all, prepared{queue: "q", kind: "k", payload: []byte(`{}`), version: 1, priority: 1, maxAttempts: 1, leaseMs: 1000,
		metadata: nil, tags: []string{}})
	runAts = append(runAts, time.Unix(0, 0))
	return all, runAts
}

// TestCSVRowsReadInAnySize: however small the reader's buffer, the bytes are those of the rows
// encoded in one piece (a row larger than the buffer is handed out across Reads).
func TestCSVRowsReadInAnySize(t *testing.T) {
	all, runAts := hostileCSVRows(t)
	var whole []byte
	ref := &csvRows{all: all, runAts: runAts, extras: true}
	for i := range all {
		whole = ref.appendRow(whole, i)
	}
	for _, size := range []int{1, 2, 7, 100, 4096, 65531, 1 << 20} {
		r := &csvRows{all: all, runAts: runAts, extras: true}
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := r.Read(buf)
			if n > size || n < 0 {
				t.Fatalf("Read returned %d bytes into a buffer of %d", n, size)
			}
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("Read before EOF returned %d bytes, error %v", n, err)
			}
		}
		require.Equal(t, whole, got, "buffer of %d bytes", size)
	}
}

// TestCSVRowsRoundTrip: the server reads back, column for column, exactly what was encoded.
func TestCSVRowsRoundTrip(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	all, runAts := hostileCSVRows(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `CREATE TEMP TABLE csv_rt (n serial, queue text, kind text, payload jsonb, payload_version int,
		priority smallint, max_attempts int, lease_ms int, run_at timestamptz, metadata jsonb, tags text[])`)
	require.NoError(t, err)
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, &csvRows{all: all, runAts: runAts, extras: true},
		"COPY csv_rt (queue, kind, payload, payload_version, priority, max_attempts, lease_ms, run_at, metadata, tags) FROM STDIN (FORMAT csv)")
	require.NoError(t, err)
	require.EqualValues(t, len(all), tag.RowsAffected())

	rows, err := conn.Query(ctx, `SELECT queue, kind, payload::text, payload_version, priority, max_attempts, lease_ms, run_at, metadata::text, tags FROM csv_rt ORDER BY n`)
	require.NoError(t, err)
	i := 0
	for rows.Next() {
		var q, k, payload, meta string
		var version, maxAttempts, leaseMs int32
		var priority int16
		var runAt time.Time
		var tags []string
		require.NoError(t, rows.Scan(&q, &k, &payload, &version, &priority, &maxAttempts, &leaseMs, &runAt, &meta, &tags))
		p := all[i]
		require.Equal(t, p.queue, q, "row %d", i)
		require.Equal(t, p.kind, k, "row %d", i)
		require.JSONEq(t, string(p.payload), payload, "row %d", i)
		require.Equal(t, []any{p.version, p.priority, p.maxAttempts, p.leaseMs}, []any{version, priority, maxAttempts, leaseMs}, "row %d", i)
		require.True(t, runAts[i].Truncate(time.Microsecond).Equal(runAt), "row %d: run_at %v, want %v", i, runAt, runAts[i])
		wantMeta := string(p.metadata)
		if wantMeta == "" {
			wantMeta = "{}"
		}
		require.JSONEq(t, wantMeta, meta, "row %d", i)
		require.Equal(t, p.tags, tags, "row %d", i)
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(all), i)
}

// TestFastSignalSQLSaysWhatItIsGiven: the parameterless new-job signal InsertManyFast sends in
// its COPY query carries each band's queue (any text, with quotes and backslashes, whatever
// standard_conforming_strings says), priority and due time, and now() for due time 0.
func TestFastSignalSQLSaysWhatItIsGiven(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET standard_conforming_strings = off; LISTEN tenure_jobs")
	require.NoError(t, err)
	defer conn.Exec(ctx, "RESET standard_conforming_strings; UNLISTEN *") //nolint:errcheck

	due := map[signalBand]int64{
		{`it's`, 1}:             0,
		{`back\slash'); --`, 4}: 1764644645123456,
		{"é漢字🙂", 2}:             1,
	}
	var dbNow time.Time
	require.NoError(t, conn.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	_, err = conn.Exec(ctx, fastSignalSQL("tenure_jobs", due))
	require.NoError(t, err)
	got := map[string]string{}
	for range due {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		f := bytes.Split([]byte(n.Payload), []byte{31})
		require.Len(t, f, 3, n.Payload)
		got[string(f[0])+"/"+string(f[1])] = string(f[2])
	}
	nowUs, ok := got["it's/1"]
	require.True(t, ok, "%v", got)
	var us int64
	_, err = fmt.Sscan(nowUs, &us)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow, time.UnixMicro(us), time.Minute)
	require.Equal(t, map[string]string{"it's/1": nowUs, `back\slash'); --/4`: "1764644645123456", "é漢字🙂/2": "1"}, got)
}
