package tenurenats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenurenats/internal/natsdb"
)

// TestStatementsUnderGrantRoles: tenurenats' own statements (internal/natsdb) run under the
// roles the core's grant functions make. An enqueuer role (tenure.grant_enqueuer) writes an
// outbox message, as tenurenats.Publish and InsertTx do in the application's transaction; the
// worker role (tenure.grant_worker) runs every statement of the outbox relay (claim, retry
// later, mark sent, pending, prune) and of the JetStream effect ledger (record, get, prune).
// None of them is refused.
func TestStatementsUnderGrantRoles(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	wrole := pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')")
	erole := pgtest.NewRole(t, pool, "SELECT tenure.grant_enqueuer('{role}')")
	wp := pgtest.RolePool(t, pool, wrole, 2)
	ep := pgtest.RolePool(t, pool, erole, 2)

	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	count := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %d rows, want %d", what, got, want)
		}
	}

	// The enqueuer writes a message to the outbox.
	_, err := natsdb.New(ep).OutboxInsert(ctx, natsdb.OutboxInsertParams{MsgID: "m1", Subject: "orders.created", Payload: []byte("x"), Headers: []byte("{}")})
	ok("OutboxInsert", err)

	// The outbox relay's and the JetStream ledger's statements, as the worker role.
	wq := natsdb.New(wp)
	tok := uuid.New()
	claimed, err := wq.OutboxClaim(ctx, natsdb.OutboxClaimParams{ClaimToken: tok, ClaimedBy: "relay", LeaseS: 30, Batch: 10})
	ok("OutboxClaim", err)
	count("OutboxClaim", len(claimed), 1)
	n, err := wq.OutboxRetryLater(ctx, natsdb.OutboxRetryLaterParams{DelayS: 0, LastError: "test", ID: claimed[0].ID, ClaimToken: tok})
	ok("OutboxRetryLater", err)
	count("OutboxRetryLater", int(n), 1)
	tok = uuid.New()
	claimed, err = wq.OutboxClaim(ctx, natsdb.OutboxClaimParams{ClaimToken: tok, ClaimedBy: "relay", LeaseS: 30, Batch: 10})
	ok("OutboxClaim", err)
	count("OutboxClaim", len(claimed), 1)
	sent, err := wq.OutboxMarkSent(ctx, natsdb.OutboxMarkSentParams{ClaimToken: tok, Ids: []int64{claimed[0].ID}, Streams: []string{"ORDERS"}, Seqs: []int64{1}})
	ok("OutboxMarkSent", err)
	count("OutboxMarkSent", len(sent), 1)
	_, err = wq.OutboxPending(ctx)
	ok("OutboxPending", err)
	n, err = wq.OutboxPruneSent(ctx, natsdb.OutboxPruneSentParams{Before: time.Now().Add(time.Hour), Batch: 10})
	ok("OutboxPruneSent", err)
	count("OutboxPruneSent", int(n), 1)
	_, err = wq.StreamEffectRecord(ctx, natsdb.StreamEffectRecordParams{Key: "nats:S:job:1:effect:e", Stream: "S", Seq: 1, Name: "e", Generation: 1, Result: []byte(`"r"`)})
	ok("StreamEffectRecord", err)
	_, err = wq.StreamEffectGet(ctx, "nats:S:job:1:effect:e")
	ok("StreamEffectGet", err)
	n, err = wq.StreamEffectPrune(ctx, natsdb.StreamEffectPruneParams{Before: time.Now().Add(time.Hour), Batch: 10})
	ok("StreamEffectPrune", err)
	count("StreamEffectPrune", int(n), 1)

	// The enqueuer role is not the relay: it cannot mark messages sent.
	_, err = natsdb.New(ep).OutboxMarkSent(ctx, natsdb.OutboxMarkSentParams{ClaimToken: tok, Ids: []int64{1}, Streams: []string{"ORDERS"}, Seqs: []int64{1}})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("the enqueuer role must not run OutboxMarkSent; got %v", err)
	}
}
