package tenurenats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/testkit"
)

// envNATS overrides the NATS server the tests use (default nats://127.0.0.1:4222).
const envNATS = "TENURE_NATS_URL"

func natsURL() string {
	if u := os.Getenv(envNATS); u != "" {
		return u
	}
	return nats.DefaultURL
}

func TestMain(m *testing.M) {
	if role := testkit.ChildRole(); role != "" {
		os.Exit(childMain(role))
	}
	pgtest.Main(m)
}

// connect returns a JetStream context on the test server, or skips the test when no NATS
// server with JetStream answers.
func connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		t.Skipf("NATS is not reachable at %s (set %s): %v", natsURL(), envNATS, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Skipf("NATS at %s has no JetStream: %v", natsURL(), err)
	}
	return nc, js
}

// testStream creates a stream with a unique name capturing "<prefix>.>" and deletes it when
// the test ends. It returns the stream and its subject prefix.
func testStream(t testing.TB, js jetstream.JetStream, dupWindow time.Duration) (jetstream.Stream, string) {
	t.Helper()
	id := fmt.Sprintf("%d%06d", time.Now().UnixNano()%1e9, rand.IntN(1e6))
	name, prefix := "TENURE_T"+id, "tenuret"+id
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"},
		Duplicates: dupWindow, Storage: jetstream.FileStorage, MaxAge: time.Hour})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Logf("delete stream %s: %v", name, err)
		}
	})
	return s, prefix
}

// streamMessages reads every message of the stream by sequence (direct gets, no consumer):
// the messages as stored, duplicates included.
func streamMessages(t testing.TB, s jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get seq %d: %v", seq, err)
		}
		out = append(out, m)
	}
	if uint64(len(out)) != info.State.Msgs {
		t.Fatalf("read %d messages, stream state says %d", len(out), info.State.Msgs)
	}
	return out
}

func newPoolURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewMigratedDB(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
