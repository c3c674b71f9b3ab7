package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// hostileArgs is a kind whose handler misbehaves as Mode says.
type hostileArgs struct {
	Mode string `json:"mode"`
	Text string `json:"text,omitempty"`
	Nest any    `json:"nest,omitempty"`
}

func (hostileArgs) Kind() string        { return "hostile" }
func (hostileArgs) PayloadVersion() int { return 1 }

func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = map[string]any{"a": v}
	}
	return v
}

// TestHostileInput (the hostile-input row of the matrix): enqueue-side garbage is refused with
// a typed error and writes nothing; run-side garbage (NUL and invalid UTF-8 in errors and
// panics, 1 MB error messages, handlers that ignore their context, stored payloads that no
// longer decode) ends each job in the state the contract names; and 300 canary jobs on the
// same worker all succeed meanwhile. Stop still returns within its budget.
func TestHostileInput(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 20}, "hostile": {Concurrency: 10}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[hostileArgs]) error {
		switch job.Args.Mode {
		case "nul-error":
			return errors.New("bad\x00bytes \xff\xfe in an error")
		case "mb-error":
			return errors.New(strings.Repeat("é\x00", 1<<19)) // ~1.5 MB
		case "panic-nul":
			panic("panic \x00 with \xc3\x28 bytes")
		case "ignore-ctx":
			time.Sleep(1500 * time.Millisecond) // past Timeout and StuckGrace, ignoring ctx
			return nil
		case "permanent-nul":
			return worker.Permanent(errors.New("\x00"))
		}
		return nil // "nested", "ok"
	}, &worker.HandlerOptions{Queue: "hostile", MaxAttempts: 2, Timeout: 200 * time.Millisecond, Lease: time.Second,
		Retry: worker.FullJitter{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond}})
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
		return n
	}

	// Enqueue side: refused, typed, nothing written.
	before := count()
	refused := []struct {
		name string
		args generics.Args
		opts *jobs.InsertOpts
		want error
	}{
		{"payload over 64 KiB", hostileArgs{Mode: "ok", Text: strings.Repeat("x", 70<<10)}, nil, generics.ErrPayloadTooLarge},
		{"NUL in a string", hostileArgs{Mode: "ok", Text: "a\x00b"}, nil, generics.ErrNULCharacter},
		{"invalid UTF-8", hostileArgs{Mode: "ok", Text: "\xff\xfe"}, nil, generics.ErrInvalidUTF8},
		{"nesting past the depth a handler can decode", hostileArgs{Mode: "ok", Nest: nested(20000)}, nil, generics.ErrJSONTooDeep},
		{"a payload past the size limit", hostileArgs{Mode: "ok", Text: strings.Repeat("x", generics.MaxArgsBytes)}, nil, generics.ErrPayloadTooLarge},
		{"empty queue", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Queue: " "}, jobs.ErrInvalidOptions},
		{"queue with NUL", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Queue: "q\x00"}, jobs.ErrInvalidOptions},
		{"queue path", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Queue: "../etc/passwd"}, jobs.ErrInvalidOptions},
		{"long queue", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Queue: strings.Repeat("q", 300)}, jobs.ErrInvalidOptions},
		{"priority 10", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Priority: 10}, jobs.ErrInvalidOptions},
		{"priority -1", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Priority: -1}, jobs.ErrInvalidOptions},
		{"max attempts 1001", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{MaxAttempts: 1001}, jobs.ErrInvalidOptions},
		{"max attempts -1", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{MaxAttempts: -1}, jobs.ErrInvalidOptions},
		{"lease 1 ms", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Lease: time.Millisecond}, jobs.ErrInvalidOptions},
		{"lease 48 h", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Lease: 48 * time.Hour}, jobs.ErrInvalidOptions},
		{"run at year 2", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{RunAt: time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC)}, jobs.ErrInvalidOptions},
		{"run at year 300000", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{RunAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}, jobs.ErrInvalidOptions},
		{"negative delay", hostileArgs{Mode: "ok"}, &jobs.InsertOpts{Delay: -time.Hour}, jobs.ErrInvalidOptions},
	}
	for _, r := range refused {
		_, err := c.Insert(ctx, r.args, r.opts)
		require.ErrorIs(t, err, r.want, r.name)
		_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: faultArgs{N: -1}}, {Args: r.args, Opts: r.opts}})
		require.ErrorIs(t, err, r.want, r.name+" (InsertMany: the good row is not written either)")
	}
	require.Equal(t, before, count(), "a refused enqueue wrote something")

	// Run side, with 300 canaries on the same worker.
	type want struct {
		state generics.JobState
		code  string
	}
	cases := map[string]want{
		"nul-error":     {generics.JobStateDead, "HANDLER_ERROR"},
		"mb-error":      {generics.JobStateDead, "HANDLER_ERROR"},
		"panic-nul":     {generics.JobStateDead, "PANIC"},
		"ignore-ctx":    {generics.JobStateDead, ""}, // TIMEOUT or LEASE_EXPIRED, whichever lands last
		"permanent-nul": {generics.JobStateDead, "PERMANENT"},
		"nested":        {generics.JobStateSucceeded, ""},
	}
	ids := map[int64]string{}
	for mode := range cases {
		args := hostileArgs{Mode: mode}
		if mode == "nested" {
			args.Nest = nested(500)
		}
		for range 3 {
			row, err := c.Insert(ctx, args, nil)
			require.NoError(t, err, mode)
			ids[row.Job.ID] = mode
		}
	}
	// A stored payload that no longer decodes (an unknown field, written by hand).
	var undecodable int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, max_attempts)
		VALUES ('hostile', 'hostile', '{"mode":"ok","surprise":"\u00e9"}', 5) RETURNING id`).Scan(&undecodable))
	canaries := insertN(t, c, 300, func(i int) any { return faultArgs{N: i} }, nil)

	start := time.Now()
	startWorker(t, w)
	waitFor(t, 30*time.Second, "every canary to succeed", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND state = 'succeeded'`, canaries).Scan(&n))
		return n == len(canaries)
	})
	canaryDrain := time.Since(start)
	waitFor(t, 30*time.Second, "every hostile job to end", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE queue = 'hostile' AND finished_at IS NULL`).Scan(&n))
		return n == 0
	})
	for id, mode := range ids {
		got, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, cases[mode].state, got.State, "%s (job %d): %+v", mode, id, got.Errors)
		if cases[mode].code != "" {
			require.Equal(t, cases[mode].code, got.LastErrorCode, mode)
		}
		for _, e := range got.Errors {
			require.NotContains(t, e.Message, "\x00", mode)
			require.LessOrEqual(t, len(e.Message), 2100, mode)
		}
	}
	got, err := c.Get(ctx, undecodable)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, got.State)
	require.Equal(t, "INVALID_PAYLOAD", got.LastErrorCode)

	all := append([]int64{undecodable}, canaries...)
	for id := range ids {
		all = append(all, id)
	}
	var tl tally
	tl.Jobs = len(all)
	// Audit: nothing lost, nothing running; states were checked per case above.
	var running, present int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'), count(*) FROM tenure.jobs WHERE id = ANY($1)`, all).Scan(&running, &present))
	tl.Lost, tl.Stuck = len(all)-present, running
	st := w.Stats()
	stopStart := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	stopErr := w.Stop(sctx)
	cancel()
	stopTook := time.Since(stopStart)
	result(t, "hostile-input", tl, "n/a", "refused_inputs="+fmt.Sprint(len(refused)*2), "canaries=300",
		"canary_drain="+ms(canaryDrain), "panics="+fmt.Sprint(st.Panics), "stuck_handlers="+fmt.Sprint(st.Stuck),
		"finish_abandoned="+fmt.Sprint(st.FinishAbandoned), "stop="+ms(stopTook))
	require.Zero(t, st.FinishAbandoned, "a finish was given up")
	require.Less(t, stopTook, 2100*time.Millisecond, "Stop outlived its context")
	_ = stopErr // handlers sleeping past their timeout may still be running: ErrHandlersStillRunning is allowed
}
