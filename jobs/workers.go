package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// WorkerQueue is one queue a registered worker works, as it registered it.
type WorkerQueue struct {
	Concurrency int `json:"concurrency"`
	// Paused reports that the worker saw the queue paused (jobs.Client.PauseQueue) at its
	// last registry write, and claims nothing from it.
	Paused bool `json:"paused,omitempty"`
}

// WorkerInfo is one row of the worker registry (tenure.workers): a worker process that is
// running, or that stopped without deregistering (killed) and has not been aged out yet.
//
// Each worker upserts its row every registry interval (worker.Config.RegistryEvery), deletes
// it when it stops gracefully, and deletes the rows of other workers whose ExpiresAt passed.
type WorkerInfo struct {
	ID      string
	Host    string
	PID     int
	Version string // Tenure's module version in the worker's binary ("(devel)" when unknown)
	Queues  map[string]WorkerQueue
	// StartedAt is when the worker started; HeartbeatAt when it last wrote its row.
	StartedAt, HeartbeatAt time.Time
	// ExpiresAt is when other workers may delete the row if it is not refreshed.
	ExpiresAt time.Time
	// LastSuccessAt is when the worker last confirmed a succeeded job (nil: never).
	LastSuccessAt *time.Time
	// Counters are the worker's engine counters since it started, as of HeartbeatAt
	// (claimed, succeeded, retried, dead, cancelled, released, stale_rejected, leases_lost,
	// reclaimed, running, ...; see worker.Stats).
	Counters map[string]int64
	// HeartbeatAge is now minus HeartbeatAt, both on the database clock.
	HeartbeatAge time.Duration
	// Expired reports that ExpiresAt passed: the worker is most likely gone.
	Expired bool
}

// Workers returns the worker registry, ordered by worker id. It reads one small table.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	rows, err := c.q.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerInfo, 0, len(rows))
	for _, r := range rows {
		wi := WorkerInfo{
			ID: r.ID, Host: r.Host, PID: int(r.Pid), Version: r.Version,
			StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, ExpiresAt: r.ExpiresAt,
			LastSuccessAt: r.LastSuccessAt, HeartbeatAge: secs(r.HeartbeatAgeS), Expired: r.Expired,
			Queues: map[string]WorkerQueue{}, Counters: map[string]int64{},
		}
		if err := json.Unmarshal(r.Queues, &wi.Queues); err != nil {
			return nil, fmt.Errorf("tenure: worker %q: queues: %w", r.ID, err)
		}
		if err := json.Unmarshal(r.Counters, &wi.Counters); err != nil {
			return nil, fmt.Errorf("tenure: worker %q: counters: %w", r.ID, err)
		}
		out = append(out, wi)
	}
	return out, nil
}
