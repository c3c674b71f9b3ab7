package adapter_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenureq/tenure/bench/internal/adapter"
	"github.com/tenureq/tenure/bench/internal/adaptertest"
	_ "github.com/tenureq/tenure/bench/internal/sut/riversut"
)

func TestConfigFromEnvDefaultsAndErrors(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://x/y"}
	cfg, err := adapter.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scenario != "long_horizon" || cfg.ProducerMode != "fixed" || cfg.PayloadBytes != 256 ||
		cfg.WorkMS != 1 || cfg.SampleEveryS != 5 || cfg.MaxConns != cfg.WorkerCount/4+10 {
		t.Fatalf("defaults wrong: %+v", cfg)
	}
	env = map[string]string{"PRODUCER_MODE": "bursty", "SAMPLE_EVERY_S": "0", "WORKER_COUNT": "x"}
	_, err = adapter.ConfigFromEnv(func(k string) string { return env[k] })
	for _, want := range []string{"DATABASE_URL", "PRODUCER_MODE", "SAMPLE_EVERY_S", "WORKER_COUNT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}

func TestValidateRejectsContractViolations(t *testing.T) {
	desc := `{"kind":"descriptor","system":"river","event_tables":["public.river_job"],"extensions":[],"version":"v","schema_version":"6","db_name":"d","started_at":"2026-04-17T09:00:10.000Z"}`
	tick := func(ts string, override map[string]string) string {
		var b strings.Builder
		for _, m := range adapter.Metrics {
			w := "30"
			switch m {
			case "enqueue_rate", "completion_rate":
				w = "1"
			case "queue_depth":
				w = "0"
			}
			v := "1"
			if o, ok := override[m]; ok {
				v = o
			}
			b.WriteString(`{"t":"` + ts + `","system":"river","kind":"adapter","subject_kind":"adapter","subject":"","metric":"` + m + `","value":` + v + `,"window_s":` + w + "}\n")
		}
		return b.String()
	}
	good := desc + "\n" + tick("2026-04-17T09:00:11.000Z", nil) + tick("2026-04-17T09:00:12.000Z", nil)
	if _, err := adapter.Validate(strings.NewReader(good), "river", 1); err != nil {
		t.Fatalf("valid stream rejected: %v", err)
	}
	bad := map[string]string{
		"log line on stdout":  good + "starting workers\n",
		"unaligned t":         desc + "\n" + tick("2026-04-17T09:00:11.500Z", nil),
		"negative value":      desc + "\n" + tick("2026-04-17T09:00:11.000Z", map[string]string{"queue_depth": "-1"}),
		"percentiles swapped": desc + "\n" + tick("2026-04-17T09:00:11.000Z", map[string]string{"claim_p50_ms": "9"}),
		"missing metric":      desc + "\n" + strings.Join(strings.SplitAfter(tick("2026-04-17T09:00:11.000Z", nil), "\n")[1:], ""),
		"no descriptor":       tick("2026-04-17T09:00:11.000Z", nil),
	}
	for name, s := range bad {
		if _, err := adapter.Validate(strings.NewReader(s), "river", 1); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunRiverInProcess drives the contract loop with the River driver (the adapter's other
// half: everything but the Tenure binary) against a fresh database and validates the stream.
func TestRunRiverInProcess(t *testing.T) {
	dbURL := adaptertest.FreshDatabase(t, "adapter_river")
	env := map[string]string{
		"DATABASE_URL": dbURL, "SCENARIO": "long_horizon", "PRODUCER_MODE": "fixed",
		"PRODUCER_RATE": "300", "WORKER_COUNT": "8", "JOB_PAYLOAD_BYTES": "256",
		"JOB_WORK_MS": "1", "SAMPLE_EVERY_S": "1",
	}
	cfg, err := adapter.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	logOut := io.Discard
	if testing.Verbose() {
		logOut = os.Stderr
	}
	done := make(chan error, 1)
	go func() {
		done <- adapter.Run(ctx, cfg, adapter.Options{
			System: "river", Version: "test", Stdout: &out,
			Logger: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	time.Sleep(4500 * time.Millisecond)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancellation")
	}
	t.Logf("shutdown took %s", time.Since(start))
	st, err := adapter.Validate(strings.NewReader(out.String()), "river", 1)
	if err != nil {
		t.Fatalf("contract violation: %v\n%s", err, out.String())
	}
	adaptertest.CheckSemantics(t, st, 300)
}
