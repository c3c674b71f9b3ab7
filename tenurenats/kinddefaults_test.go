package tenurenats_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

// natsTick declares its kind's defaults with the args type.
type natsTick struct {
	N int `json:"n"`
}

func (natsTick) Kind() string        { return "nats_tick" }
func (natsTick) PayloadVersion() int { return 1 }
func (natsTick) Defaults() generics.KindDefaults {
	return generics.KindDefaults{Queue: "periodic", MaxAttempts: 4, Lease: 7 * time.Second, Timeout: 9 * time.Second}
}

// A tenurenats client without a registry gives a declared kind's jobs the declared max
// attempts (the header the JetStream worker counts against); a per-insert value wins.
func TestInsertTxUsesDeclaredDefaults(t *testing.T) {
	pool, _ := newPoolURL(t)
	c, err := tenurenats.NewClient(nil, &tenurenats.ClientConfig{SubjectPrefix: "kd.jobs"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	insert := func(opts *jobs.InsertOpts) string {
		t.Helper()
		var id int64
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			id, err = tenurenats.InsertTx(ctx, tx, c, natsTick{N: 1}, opts)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var raw []byte
		if err := pool.QueryRow(ctx, `SELECT headers FROM tenure.outbox WHERE id = $1`, id).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var hdr map[string]any
		if err := json.Unmarshal(raw, &hdr); err != nil {
			t.Fatal(err)
		}
		switch v := hdr[tenurenats.HeaderMaxAttempts].(type) {
		case string:
			return v
		case []any:
			if len(v) == 1 {
				s, _ := v[0].(string)
				return s
			}
		}
		t.Fatalf("headers %s: no single %s", raw, tenurenats.HeaderMaxAttempts)
		return ""
	}
	if got := insert(nil); got != "4" {
		t.Fatalf("max attempts header %q, want the declared 4", got)
	}
	if got := insert(&jobs.InsertOpts{MaxAttempts: 2}); got != "2" {
		t.Fatalf("max attempts header %q, want the insert's 2", got)
	}
}

// tenurenats.Register takes the declared defaults like worker.Register, and refuses options
// that contradict them.
func TestNatsRegisterTakesDeclaredDefaults(t *testing.T) {
	e := newEnv(t)
	w, err := tenurenats.NewWorker(e.js, e.config(nil))
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *generics.Job[natsTick]) error { return nil }
	if err := tenurenats.Register(w, noop, &worker.HandlerOptions{MaxAttempts: 10}); !errors.Is(err, worker.ErrDefaultsConflict) {
		t.Fatalf("conflicting MaxAttempts: %v, want ErrDefaultsConflict", err)
	}
	if err := tenurenats.Register(w, noop, nil); err != nil {
		t.Fatal(err)
	}
	info, ok := w.Registry().Lookup("nats_tick")
	if !ok {
		t.Fatal("not registered")
	}
	if d := info.Defaults; d.MaxAttempts != 4 || d.Lease != 7*time.Second || d.Queue != "periodic" {
		t.Fatalf("registered defaults %+v, want the declared ones", d)
	}
}
