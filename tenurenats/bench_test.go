package tenurenats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenurenats"
)

// BenchmarkRelayThroughput measures how fast a Relay drains a backlog of committed outbox
// rows (256-byte payloads) into a JetStream stream (file storage, 2 min duplicate window): b.N
// rows are committed first, then one relay publishes and marks them all. Reports msgs/s.
//
//	go test -run '^$' -bench RelayThroughput -benchtime 20000x ./tenurenats/
func BenchmarkRelayThroughput(b *testing.B) {
	for _, c := range []struct{ batch, pipelines int }{{100, 1}, {100, 2}, {500, 4}} {
		b.Run(fmt.Sprintf("batch=%d/pipelines=%d", c.batch, c.pipelines), func(b *testing.B) {
			_, js := connect(b)
			pool := pgtest.NewPool(b)
			s, prefix := testStream(b, js, 2*time.Minute)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `INSERT INTO tenure.outbox (msg_id, subject, payload)
				SELECT gen_random_uuid()::text, $1, convert_to(repeat('x', 256), 'UTF8') FROM generate_series(1, $2)`,
				prefix+".orders", b.N); err != nil {
				b.Fatal(err)
			}
			r, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Stream: s.CachedInfo().Config.Name, Batch: c.batch,
				Pipelines: c.pipelines, PollInterval: 5 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			for {
				if st := r.Stats(); st.Marked >= int64(b.N) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if info.State.Msgs != uint64(b.N) {
				b.Fatalf("stream holds %d messages, want %d", info.State.Msgs, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// BenchmarkJetStreamPublishBaseline is the ceiling the relay works under: asynchronous
// publishes of 256-byte messages with message ids into a file-storage stream, no database.
//
//	go test -run '^$' -bench JetStreamPublishBaseline -benchtime 20000x ./tenurenats/
func BenchmarkJetStreamPublishBaseline(b *testing.B) {
	_, js := connect(b)
	_, prefix := testStream(b, js, 2*time.Minute)
	payload := make([]byte, 256)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		m := nats.NewMsg(prefix + ".orders")
		m.Data = payload
		if _, err := js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprint("id-", i))); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("acknowledgements did not arrive")
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
