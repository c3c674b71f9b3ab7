package tenurenats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/internal/testkit"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

// publishN commits n messages "m<i>" to subject in transactions of up to 50, and one rolled
// back transaction of messages that must never be published. It returns the row ids.
func publishN(t testing.TB, pool *pgxpool.Pool, subject string, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for start := 0; start < n; start += 50 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for i := start; i < min(start+50, n); i++ {
				id, err := tenurenats.Publish(ctx, tx, subject, []byte(fmt.Sprintf("m%d", i)),
					&tenurenats.PublishOpts{Headers: map[string][]string{"Order": {fmt.Sprint(i)}}})
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenurenats.Publish(ctx, tx, subject, []byte("rolled-back"), nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkExactlyOnce asserts the stream holds exactly the n committed messages, each once: the
// total, the distinct Nats-Msg-Ids and the distinct payloads all equal n, the rolled-back
// message is absent, and every row is marked sent with the sequence its message has.
func checkExactlyOnce(t *testing.T, pool *pgxpool.Pool, s jetstream.Stream, n int) {
	t.Helper()
	msgs := streamMessages(t, s)
	ids, payloads, seqOf := map[string]bool{}, map[string]bool{}, map[string]uint64{}
	for _, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		ids[id], payloads[string(m.Data)], seqOf[id] = true, true, m.Sequence
		if string(m.Data) == "rolled-back" {
			t.Errorf("the rolled-back message was published (seq %d)", m.Sequence)
		}
		if m.Header.Get("Order") == "" {
			t.Errorf("seq %d lost its headers: %v", m.Sequence, m.Header)
		}
	}
	t.Logf("stream: %d messages, %d distinct ids, %d distinct payloads (want %d each)", len(msgs), len(ids), len(payloads), n)
	if len(msgs) != n || len(ids) != n || len(payloads) != n {
		t.Fatalf("stream holds %d messages, %d distinct ids, %d distinct payloads; want %d of each", len(msgs), len(ids), len(payloads), n)
	}
	rows, err := pool.Query(context.Background(), "SELECT msg_id, stream_seq FROM tenure.outbox WHERE sent_at IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		marked++
		if seqOf[id] != uint64(seq) {
			t.Errorf("row %s marked with seq %d, its message is at %d", id, seq, seqOf[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if marked != n {
		t.Fatalf("%d rows marked sent, want %d", marked, n)
	}
}

// drain runs an in-process relay until no row is pending.
func drain(t *testing.T, pool *pgxpool.Pool, js jetstream.JetStream, cfg tenurenats.RelayConfig) *tenurenats.Relay {
	t.Helper()
	r, err := tenurenats.NewRelay(pool, js, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 20*time.Second, "the outbox to drain", func() bool {
		n, _, err := tenurenats.Pending(context.Background(), pool)
		return err == nil && n == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRelayKilledMidBatch SIGKILLs a relay process at each step between claiming a batch and
// committing its "sent" marks; a second relay then drains the outbox. Every committed message
// must be in the stream exactly once.
func TestRelayKilledMidBatch(t *testing.T) {
	_, js := connect(t)
	for _, at := range []string{"publish", "ack", "commit"} {
		t.Run(at, func(t *testing.T) {
			pool, url := newPoolURL(t)
			s, prefix := testStream(t, js, time.Minute)
			stream := s.CachedInfo().Config.Name
			const n = 250
			publishN(t, pool, prefix+".orders", n)
			lease := time.Second
			child := testkit.StartChild(t, "relay", envChildDB+"="+url, envChildStream+"="+stream,
				envChildKillAt+"="+at, envChildLease+"="+fmt.Sprint(lease.Milliseconds()))
			line := child.WaitLine(t, "at "+at, 20*time.Second)
			child.Kill(t)
			var before uint64
			if info, err := s.Info(context.Background()); err == nil {
				before = info.State.Msgs
			}
			t.Logf("killed the relay %q; the stream held %d messages", line, before)
			if at != "publish" && before == 0 {
				t.Fatalf("killed after the acknowledgements, yet the stream is empty")
			}
			r := drain(t, pool, js, tenurenats.RelayConfig{Stream: stream, Lease: lease, PublishTimeout: lease / 2, Batch: 100})
			st := r.Stats()
			t.Logf("second relay: %+v", st)
			if at != "publish" && st.Duplicates != 100 {
				t.Errorf("second relay saw %d duplicate acknowledgements, want the killed batch's 100", st.Duplicates)
			}
			checkExactlyOnce(t, pool, s, n)
		})
	}
}

// TestRelayStaleMarkIsFenced: relay A publishes a batch and stalls past its lease; relay B
// takes the rows over, republishes them (JetStream drops the duplicates) and marks them; A's
// late mark changes nothing.
func TestRelayStaleMarkIsFenced(t *testing.T) {
	_, js := connect(t)
	pool, _ := newPoolURL(t)
	s, prefix := testStream(t, js, time.Minute)
	stream := s.CachedInfo().Config.Name
	const n = 40
	publishN(t, pool, prefix+".orders", n)
	lease := time.Second // A skips a batch whose claim is older than lease/2 when it publishes
	b, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{ID: "B", Stream: stream, Lease: lease, PublishTimeout: lease / 2})
	if err != nil {
		t.Fatal(err)
	}
	acfg := tenurenats.RelayConfig{ID: "A", Stream: stream, Lease: lease, PublishTimeout: lease / 2}
	tenurenats.SetRelayHooks(&acfg, nil, func([]int64) {
		time.Sleep(lease + 100*time.Millisecond) // A stalls; its lease runs out
		if got, err := b.RunOnce(context.Background()); err != nil || got != n {
			t.Errorf("B took over %d rows (%v), want %d", got, err, n)
		}
	}, nil)
	a, err := tenurenats.NewRelay(pool, js, &acfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.RunOnce(context.Background()); err != nil || got != n {
		t.Fatalf("A claimed %d rows (%v), want %d", got, err, n)
	}
	as, bs := a.Stats(), b.Stats()
	t.Logf("A: %+v\nB: %+v", as, bs)
	if as.Marked != 0 || as.StaleMarks != n {
		t.Errorf("A marked %d rows and had %d refused, want 0 and %d", as.Marked, as.StaleMarks, n)
	}
	if bs.Marked != n || bs.Duplicates != n {
		t.Errorf("B marked %d rows with %d duplicate acknowledgements, want %d and %d", bs.Marked, bs.Duplicates, n, n)
	}
	checkExactlyOnce(t, pool, s, n)
}

// TestRelaysShareTheOutbox runs three relays at once on one outbox while more messages are
// committed: each message lands once, and every relay did some of the work.
func TestRelaysShareTheOutbox(t *testing.T) {
	_, js := connect(t)
	pool, _ := newPoolURL(t)
	s, prefix := testStream(t, js, time.Minute)
	stream := s.CachedInfo().Config.Name
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relays := make([]*tenurenats.Relay, 3)
	done := make(chan error, len(relays))
	for i := range relays {
		r, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{ID: fmt.Sprint("r", i), Stream: stream, Batch: 20,
			PollInterval: 5 * time.Millisecond, Lease: 5 * time.Second, PublishTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		relays[i] = r
		go func() { done <- r.Run(ctx) }()
	}
	const n = 1000
	publishN(t, pool, prefix+".orders", n)
	waitFor(t, 20*time.Second, "the outbox to drain", func() bool {
		p, _, err := tenurenats.Pending(context.Background(), pool)
		return err == nil && p == 0
	})
	cancel()
	var marked int64
	for i, r := range relays {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := r.Stats()
		t.Logf("relay %d: %+v", i, st)
		marked += st.Marked
		if st.Marked == 0 {
			t.Errorf("relay %d marked nothing", i)
		}
	}
	if marked != n {
		t.Errorf("relays marked %d rows in all, want %d", marked, n)
	}
	checkExactlyOnce(t, pool, s, n)
}

func TestPublishRejectsBadInput(t *testing.T) {
	pool, _ := newPoolURL(t)
	ctx := context.Background()
	cases := []struct {
		name    string
		subject string
		payload []byte
		opts    *tenurenats.PublishOpts
		want    error
	}{
		{"empty subject", "", nil, nil, tenurenats.ErrInvalidSubject},
		{"wildcard", "orders.*", nil, nil, tenurenats.ErrInvalidSubject},
		{"tail wildcard", "orders.>", nil, nil, tenurenats.ErrInvalidSubject},
		{"empty token", "orders..paid", nil, nil, tenurenats.ErrInvalidSubject},
		{"space", "orders paid", nil, nil, tenurenats.ErrInvalidSubject},
		{"too long", strings.Repeat("a", 256), nil, nil, tenurenats.ErrInvalidSubject},
		{"payload too large", "orders.paid", make([]byte, tenurenats.MaxPayloadBytes+1), nil, tenurenats.ErrInvalidMessage},
		{"reserved header", "orders.paid", nil, &tenurenats.PublishOpts{Headers: map[string][]string{"Nats-Msg-Id": {"x"}}}, tenurenats.ErrInvalidMessage},
		{"header newline", "orders.paid", nil, &tenurenats.PublishOpts{Headers: map[string][]string{"A": {"x\r\ny"}}}, tenurenats.ErrInvalidMessage},
		{"msg id too long", "orders.paid", nil, &tenurenats.PublishOpts{MsgID: strings.Repeat("x", 201)}, tenurenats.ErrInvalidMessage},
		{"msg id invalid utf8", "orders.paid", nil, &tenurenats.PublishOpts{MsgID: "\xff"}, tenurenats.ErrInvalidMessage},
	}
	for _, c := range cases {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tenurenats.Publish(ctx, tx, c.subject, c.payload, c.opts)
			return err
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d rows written by refused publishes", rows)
	}
}

func TestRelayRefusesShortDuplicateWindow(t *testing.T) {
	_, js := connect(t)
	pool, _ := newPoolURL(t)
	s, _ := testStream(t, js, 10*time.Second)
	r, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Stream: s.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, tenurenats.ErrDuplicateWindow) {
		t.Fatalf("Run with a 10s window and a 30s lease: %v, want ErrDuplicateWindow", err)
	}
	if _, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Lease: time.Second, PublishTimeout: 2 * time.Second}); !errors.Is(err, tenurenats.ErrInvalidConfig) {
		t.Fatalf("PublishTimeout above Lease: %v, want ErrInvalidConfig", err)
	}
}

// TestPruneSent deletes sent rows past the retention and keeps pending and recent ones.
func TestPruneSent(t *testing.T) {
	pool, _ := newPoolURL(t)
	ctx := context.Background()
	ids := publishN(t, pool, "orders.paid", 6)
	// Rows 0-2 sent 2 h ago, row 3 sent now, rows 4-5 pending.
	if _, err := pool.Exec(ctx, `UPDATE tenure.outbox SET sent_at = now() - interval '2 hours', stream = 'S', stream_seq = id
		WHERE id = ANY($1)`, ids[:3]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tenure.outbox SET sent_at = now(), stream = 'S', stream_seq = id WHERE id = $1`, ids[3]); err != nil {
		t.Fatal(err)
	}
	n, err := tenurenats.PruneSent(ctx, pool, time.Hour)
	if err != nil || n != 3 {
		t.Fatalf("PruneSent deleted %d (%v), want 3", n, err)
	}
	pending, age, err := tenurenats.Pending(ctx, pool)
	if err != nil || pending != 2 || age < 0 {
		t.Fatalf("Pending: %d, %v (%v); want 2", pending, age, err)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.outbox").Scan(&left); err != nil || left != 3 {
		t.Fatalf("%d rows left (%v), want 3", left, err)
	}
}

// TestRelayRetriesFailedPublish: rows whose subject no stream captures fail to publish; they
// keep their error, wait out a full-jitter delay, and are published once a stream captures
// the subject.
func TestRelayRetriesFailedPublish(t *testing.T) {
	_, js := connect(t)
	pool, _ := newPoolURL(t)
	ctx := context.Background()
	const n = 5
	subject := fmt.Sprintf("tenurenocap%d.orders", time.Now().UnixNano())
	publishN(t, pool, subject, n)
	r, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Lease: 2 * time.Second, PublishTimeout: time.Second,
		Retry: worker.FullJitter{Base: 50 * time.Millisecond, Cap: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.RunOnce(ctx); err != nil || got != n {
		t.Fatalf("RunOnce: %d rows (%v)", got, err)
	}
	if st := r.Stats(); st.PublishErrors != n || st.Marked != 0 {
		t.Fatalf("stats %+v: want %d publish errors, nothing marked", st, n)
	}
	var withErr int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.outbox WHERE last_error <> '' AND sent_at IS NULL AND attempts = 1").Scan(&withErr); err != nil || withErr != n {
		t.Fatalf("%d rows keep their error (%v), want %d", withErr, err, n)
	}
	// Each row waits a full-jitter delay in [0, 100ms) (Base 50ms · 2^1) before a claim sees it.
	var maxWait float64
	if err := pool.QueryRow(ctx, "SELECT extract(epoch FROM max(claimed_until) - now())::float8 FROM tenure.outbox").Scan(&maxWait); err != nil || maxWait > 0.1 {
		t.Fatalf("rows wait up to %.3fs (%v), want below the 100ms bound", maxWait, err)
	}
	name := fmt.Sprintf("TENURE_NOCAP%d", time.Now().UnixNano())
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	waitFor(t, 10*time.Second, "the retried rows to be published", func() bool {
		_, _ = r.RunOnce(ctx)
		p, _, err := tenurenats.Pending(ctx, pool)
		return err == nil && p == 0
	})
	checkExactlyOnce(t, pool, s, n)
	var cleared int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.outbox WHERE last_error IS NULL AND attempts >= 2").Scan(&cleared); err != nil || cleared != n {
		t.Fatalf("%d rows sent on a later attempt with the error cleared (%v), want %d", cleared, err, n)
	}
}
