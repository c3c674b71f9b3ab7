package tenurenats

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/tenurenats/internal/natsdb"
	"github.com/tenureq/tenure/worker"
)

// SetRelayHooks installs the kill tests' stopping points on a relay configuration.
func SetRelayHooks(c *RelayConfig, afterPublish, afterAck, beforeCommit func(ids []int64)) {
	c.hooks = relayHooks{afterPublish: afterPublish, afterAck: afterAck, beforeCommit: beforeCommit}
}

// NewStreamLedger exposes the JetStream jobs' effect ledger (in schema tenure) to the tests.
func NewStreamLedger(pool *pgxpool.Pool, stream string, seq int64) worker.ExternalLedger {
	return &streamLedger{q: natsdb.New(pool), stream: stream, seq: seq}
}
