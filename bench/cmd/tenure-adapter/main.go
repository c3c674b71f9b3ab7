// Command tenure-adapter is Tenure's adapter for the long-horizon portable benchmark
// (github.com/hardbyte/postgresql-job-queue-benchmarking, CONTRIBUTING_ADAPTERS.md).
//
// It reads DATABASE_URL, SCENARIO (long_horizon; also migrate_only), PRODUCER_MODE (fixed |
// depth-target), PRODUCER_RATE, TARGET_DEPTH, WORKER_COUNT, JOB_PAYLOAD_BYTES, JOB_WORK_MS and
// SAMPLE_EVERY_S; migrates the database with Tenure's migrations; writes one JSON descriptor
// line and then, at every wall-clock multiple of SAMPLE_EVERY_S, one JSON line per metric
// (claim_p50_ms, claim_p95_ms, claim_p99_ms over a rolling 30 s window; enqueue_rate and
// completion_rate over the sampling period; queue_depth, instantaneous). stdout carries only
// telemetry; logs go to stderr. SIGTERM flushes and exits 0 within 5 seconds.
//
// Claim latency is insert → handler start: the producer stamps each job's payload with the
// wall-clock time just before its insert call, and the handler measures from that stamp.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/tenureq/tenure/bench/internal/adapter"
	_ "github.com/tenureq/tenure/bench/internal/sut/tenuresut" // registers the tenure driver
)

// version may be set at build time: -ldflags "-X main.version=<sha-or-tag>".
var version = ""

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := adapter.ConfigFromEnv(os.Getenv)
	if err != nil {
		logger.Error("tenure-adapter: bad environment", "err", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	// Whatever happens after SIGTERM, exit 0 within the contract's 5 seconds.
	context.AfterFunc(ctx, func() {
		time.AfterFunc(4500*time.Millisecond, func() {
			logger.Warn("tenure-adapter: shutdown budget exhausted, exiting")
			os.Stdout.Sync()
			os.Exit(0)
		})
	})
	err = adapter.Run(ctx, cfg, adapter.Options{
		System: "tenure", Version: buildVersion(), Stdout: os.Stdout, Logger: logger,
	})
	if err != nil {
		if ctx.Err() != nil {
			logger.Warn("tenure-adapter: interrupted during setup", "err", err)
			os.Exit(0)
		}
		logger.Error("tenure-adapter: failed", "err", err)
		os.Exit(1)
	}
}

// buildVersion is TENURE_VERSION, the -X version, or what the binary knows about the Tenure
// module it was built with.
func buildVersion() string {
	if v := os.Getenv("TENURE_VERSION"); v != "" {
		return v
	}
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/tenureq/tenure" {
				v := dep.Version
				if strings.HasPrefix(v, "v0.0.0-00010101000000") { // placeholder of a replaced module
					v = "devel"
				}
				if dep.Replace != nil {
					return fmt.Sprintf("%s (source %s)", v, dep.Replace.Path)
				}
				return v
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "dev"
}
