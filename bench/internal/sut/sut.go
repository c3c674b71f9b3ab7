// Package sut ("system under test") wraps each job queue behind the same small interface so
// every scenario drives Tenure and River identically. Each implementation uses only the
// queue's public API: its migrator, its insert client and its worker engine.
package sut

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchArgs is the one job type both queues run. Pad makes the payload the requested size;
// Seq identifies the job to the bench; EnqNs (unix ns, optional) is set by producers that
// measure latency from the payload rather than from the insert acknowledgement.
type BenchArgs struct {
	Pad   string `json:"pad"`
	Seq   int64  `json:"seq"`
	EnqNs int64  `json:"enq_ns,omitempty"`
}

// Kind is the job kind in both queues.
func (BenchArgs) Kind() string { return "bench" }

// PayloadVersion is Tenure's payload shape version.
func (BenchArgs) PayloadVersion() int { return 1 }

// Pad returns a filler string that makes an encoded BenchArgs about payloadBytes long.
func Pad(payloadBytes int) string {
	const overhead = len(`{"pad":"","seq":1234567,"enq_ns":1234567890123456789}`)
	return strings.Repeat("x", max(0, payloadBytes-overhead))
}

// Handler is called by a worker when a job's handler starts, before any synthetic work.
type Handler func(args *BenchArgs)

// Options configures one System instance.
type Options struct {
	Pool    *pgxpool.Pool
	Workers int // concurrent handlers
	// OnStart runs at handler start; OnDone after the handler's synthetic work, just before it
	// returns success. Either may be nil.
	OnStart Handler
	OnDone  Handler
	Work    time.Duration // synthetic work per job (time.Sleep); 0 = no-op handler
	// BatchAPI selects the bulk insert API where a queue has more than one ("" = default).
	BatchAPI string
	Logger   *slog.Logger
	// Peak selects the queue's peak-throughput settings (the peak scenarios): River as its own
	// benchmark configures it, Tenure as its guide tells a user to configure it; Workers is
	// then ignored. Tune overrides single peak settings by name (for sweeps; see each driver's
	// PeakKeys).
	Peak bool
	Tune map[string]string
}

// System is one queue, ready to insert and (after Start) to work jobs.
type System interface {
	// Insert inserts one job in its own transaction and returns after the commit.
	Insert(ctx context.Context, args BenchArgs) error
	// InsertBatch inserts all args with the queue's bulk API in one call, returning after the
	// commit.
	InsertBatch(ctx context.Context, args []BenchArgs) error
	// Start starts the workers; Stop stops them gracefully.
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	// Unfinished counts jobs not yet in a final state; Depth counts jobs available to claim.
	Unfinished(ctx context.Context) (int64, error)
	Depth(ctx context.Context) (int64, error)
	// Settings describes the configuration in effect, for the report.
	Settings() map[string]string
}

// Driver describes one queue implementation, or one configuration (variant) of it.
type Driver struct {
	Name string
	// Family is the queue the driver runs ("tenure" or "river"). A family can register several
	// drivers that differ only in settings (e.g. "tenure" and "tenure-async").
	Family string
	// WorkerVariantOf names the driver this one differs from only in its worker settings: the
	// inserts are the same, so a run without workers (bulk-enqueue) would measure nothing new.
	WorkerVariantOf string
	// Description says in one line how this driver is configured, for the report.
	Description string
	QueueTable  string // schema-qualified job table, for dead-tuple stats
	// BatchAPIs lists the bulk insert APIs BatchAPI may select; the first is the default.
	BatchAPIs []string
	Migrate   func(ctx context.Context, pool *pgxpool.Pool) error
	New       func(ctx context.Context, opts Options) (System, error)
	// SchemaVersion reports the schema version in effect after Migrate.
	SchemaVersion func(ctx context.Context, pool *pgxpool.Pool) (string, error)
	// PeakPool returns the MaxConns of the shared pool (the one the bench and the queue's
	// client use) in the peak scenarios, so that every connection the process opens (that
	// pool plus whatever the queue opens beside it) stays within connCap; tune as in Options.
	PeakPool func(connCap int, tune map[string]string) (int32, error)
	// PeakKeys lists the Tune keys the driver accepts, with what each sets.
	PeakKeys map[string]string
	// CeilingSQL inserts the rows $2..$3 (bigint sequence numbers) into QueueTable as one
	// server-side INSERT ... SELECT FROM generate_series, with the payload the bench's jobs
	// carry ($1 = the pad string) and the values the queue's own bulk insert stores: the
	// server's own insert ceiling for the same table and indexes (bulk-enqueue).
	CeilingSQL string
}

// ParseTune parses "key=value,key=value" into a map (empty string: nil).
func ParseTune(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("sut: tune %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// CheckTune refuses keys a driver does not know.
func CheckTune(d *Driver, tune map[string]string) error {
	for k := range tune {
		if _, ok := d.PeakKeys[k]; !ok {
			known := make([]string, 0, len(d.PeakKeys))
			for n := range d.PeakKeys {
				known = append(known, n)
			}
			sort.Strings(known)
			return fmt.Errorf("sut: %s: unknown tune key %q (known: %s)", d.Name, k, strings.Join(known, ", "))
		}
	}
	return nil
}

var drivers = map[string]*Driver{}

// Register makes a driver available by name (called from init).
func Register(d *Driver) { drivers[d.Name] = d }

// Get returns the named driver.
func Get(name string) (*Driver, error) {
	d, ok := drivers[name]
	if !ok {
		return nil, fmt.Errorf("sut: no driver %q (available: %s)", name, strings.Join(Names(), ", "))
	}
	return d, nil
}

// Names lists the registered drivers.
func Names() []string {
	out := make([]string, 0, len(drivers))
	for n := range drivers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// StderrLogger returns a logger that writes warnings and errors to stderr, tagged by system.
func StderrLogger(system string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("system", system)
}

// DiscardLogger drops everything.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
