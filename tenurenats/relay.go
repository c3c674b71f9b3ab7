package tenurenats

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/tenurenats/internal/natsdb"
	"github.com/tenureq/tenure/worker"
)

// RelayConfig configures a Relay. The zero value works; every field documents its default.
type RelayConfig struct {
	// ID names the relay in tenure.outbox.claimed_by. Default "<host>-<pid>-<random>".
	ID string
	// Stream, when set, is the stream every message must be stored in: each publish carries
	// Nats-Expected-Stream, so a subject that no stream (or another stream) captures fails
	// instead of landing elsewhere, and Run refuses to start (ErrDuplicateWindow) when the
	// stream's duplicate window is shorter than DuplicateWindowNeeded. Default "": no checks;
	// then the window requirement is yours to keep.
	Stream string
	// Batch is the number of rows one claim takes and one publish round sends. Default 100,
	// at most 1,000.
	Batch int
	// Pipelines is the number of claim-publish-mark loops this relay runs at once, each on its
	// own rows (SKIP LOCKED). Default 2.
	Pipelines int
	// Lease is how long a claim owns its rows; another relay may take them over after it.
	// It must cover a batch's publish and mark. Default 30 s.
	Lease time.Duration
	// PollInterval is the wait after a claim that found fewer rows than Batch. Default 100 ms.
	PollInterval time.Duration
	// PublishTimeout bounds the wait for a batch's publish acknowledgements; a row without an
	// acknowledgement by then is retried after Retry's delay. Default 10 s.
	PublishTimeout time.Duration
	// Retry is the delay before a row whose publish failed can be claimed again (the same
	// full-jitter backoff as the job engine, by the row's attempt count). Default
	// {Base: 100 ms, Cap: 10 s}.
	Retry worker.FullJitter
	// Retention is how long sent rows are kept before the relay deletes them; negative
	// disables the relay's pruning. Default 1 h.
	Retention time.Duration
	// PruneEvery is the interval of retention pruning. Default 1 min.
	PruneEvery time.Duration
	// Logger receives errors and warnings. Default slog.Default().
	Logger *slog.Logger
	// Schema is the PostgreSQL schema whose outbox (S.outbox) the relay reads: the one Tenure
	// was migrated into (migrations.Options.Schema; docs/guide.md, "A schema of your own") and
	// Publish writes to (PublishOpts.Schema, ClientConfig.Schema). Default "tenure". An
	// invalid name is refused by NewRelay with ErrInvalidConfig and a
	// *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
	Schema string

	hooks relayHooks // tests only (export_test.go)
}

// relayHooks lets the kill tests stop a relay between the steps of a batch.
type relayHooks struct {
	afterPublish func(ids []int64) // messages handed to the connection, acknowledgements not awaited
	afterAck     func(ids []int64) // acknowledgements received, nothing marked
	beforeCommit func(ids []int64) // rows marked sent in a transaction that has not committed
}

// DuplicateWindowNeeded is the shortest duplicate window (StreamConfig.Duplicates) of the
// target stream under which this configuration publishes each row exactly once into the
// stream: the longest time between a row's first publish and its republication by this or
// another relay with the same configuration (a claim's lease running out after a crash, or a
// failed publish's retry delay), with a margin.
func (c RelayConfig) DuplicateWindowNeeded() time.Duration {
	d, err := c.withDefaults()
	if err != nil {
		return 0
	}
	return d.Lease + d.PublishTimeout + d.Retry.Bound(62) + d.PollInterval + 5*time.Second
}

func (c RelayConfig) withDefaults() (RelayConfig, error) {
	out := c
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = fmt.Sprintf("relay-%s-%d-%06d", host, os.Getpid(), rand.IntN(1e6))
	}
	if len(out.ID) > 200 {
		return out, fmt.Errorf("%w: ID longer than 200 bytes", ErrInvalidConfig)
	}
	sch, err := dbschema.New(out.Schema)
	if err != nil {
		return out, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	out.Schema = sch.Name()
	if out.Batch == 0 {
		out.Batch = 100
	}
	if out.Batch < 1 || out.Batch > 1000 {
		return out, fmt.Errorf("%w: Batch %d not in 1..1000", ErrInvalidConfig, out.Batch)
	}
	if out.Pipelines == 0 {
		out.Pipelines = 2
	}
	if out.Pipelines < 1 || out.Pipelines > 64 {
		return out, fmt.Errorf("%w: Pipelines %d not in 1..64", ErrInvalidConfig, out.Pipelines)
	}
	if out.Lease == 0 {
		out.Lease = 30 * time.Second
	}
	if out.PollInterval == 0 {
		out.PollInterval = 100 * time.Millisecond
	}
	if out.PublishTimeout == 0 {
		out.PublishTimeout = 10 * time.Second
	}
	if out.Retry.Base == 0 {
		out.Retry.Base = 100 * time.Millisecond
	}
	if out.Retry.Cap == 0 {
		out.Retry.Cap = 10 * time.Second
	}
	if out.Retention == 0 {
		out.Retention = time.Hour
	}
	if out.PruneEvery == 0 {
		out.PruneEvery = time.Minute
	}
	switch {
	case out.Lease < 100*time.Millisecond:
		return out, fmt.Errorf("%w: Lease %v below 100ms", ErrInvalidConfig, out.Lease)
	case out.PublishTimeout <= 0 || out.PublishTimeout >= out.Lease:
		return out, fmt.Errorf("%w: PublishTimeout %v must be positive and shorter than Lease %v", ErrInvalidConfig, out.PublishTimeout, out.Lease)
	case out.PollInterval < 0 || out.Retry.Base < 0 || out.Retry.Cap < 0 || out.PruneEvery < 0:
		return out, fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// RelayStats are a relay's counters since it was created.
type RelayStats struct {
	Claimed       int64 // rows claimed (a row claimed twice counts twice)
	Published     int64 // rows acknowledged by JetStream, duplicates included
	Duplicates    int64 // acknowledgements that said JetStream already had the message id
	Marked        int64 // rows marked sent by this relay
	StaleMarks    int64 // acknowledged rows this relay could not mark: its claim had been taken over
	PublishErrors int64 // rows whose publish failed or timed out (retried later)
	Pruned        int64 // sent rows deleted by retention
}

// Relay moves committed outbox rows (Publish) to JetStream: it claims pending rows with a
// fresh claim token and a lease (FOR UPDATE SKIP LOCKED, so several relays share the work),
// publishes each with its msg_id as Nats-Msg-Id, waits for JetStream's acknowledgements and
// marks the acknowledged rows sent where its token still holds them. A relay that dies at any
// point leaves its rows to be claimed again after the lease; JetStream drops the repeated
// publication of an acknowledged message by its id inside the stream's duplicate window
// (see DuplicateWindowNeeded and docs/guide.md, "Past one database: JetStream").
type Relay struct {
	pool    *pgxpool.Pool
	sch     *dbschema.Schema // RelayConfig.Schema: every statement runs through sch.Wrap
	js      jetstream.JetStream
	cfg     RelayConfig
	running atomic.Bool

	claimed, published, duplicates, marked, stale, pubErrors, pruned atomic.Int64
}

// NewRelay returns a relay that reads the outbox through pool and publishes through js.
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, cfg *RelayConfig) (*Relay, error) {
	if pool == nil || js == nil {
		return nil, fmt.Errorf("%w: nil pool or JetStream", ErrInvalidConfig)
	}
	var c RelayConfig
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{pool: pool, sch: dbschema.Must(c.Schema), js: js, cfg: c}, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Claimed: r.claimed.Load(), Published: r.published.Load(), Duplicates: r.duplicates.Load(),
		Marked: r.marked.Load(), StaleMarks: r.stale.Load(), PublishErrors: r.pubErrors.Load(), Pruned: r.pruned.Load()}
}

// Run relays until ctx ends, then finishes the batches in flight (their marks are written
// even though ctx has ended) and returns nil. It returns an error at once when the relay is
// already running, or when Config.Stream is set and the stream cannot be read or its
// duplicate window is too short (ErrDuplicateWindow).
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer r.running.Store(false)
	if r.cfg.Stream != "" {
		s, err := r.js.Stream(ctx, r.cfg.Stream)
		if err != nil {
			return fmt.Errorf("tenurenats: relay: stream %q: %w", r.cfg.Stream, err)
		}
		if need, have := r.cfg.DuplicateWindowNeeded(), s.CachedInfo().Config.Duplicates; have < need {
			return fmt.Errorf("%w: stream %q keeps message ids for %v, this relay needs at least %v (Lease + PublishTimeout + Retry.Cap + PollInterval + 5s)",
				ErrDuplicateWindow, r.cfg.Stream, have, need)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < r.cfg.Pipelines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.pipeline(ctx)
		}()
	}
	if r.cfg.Retention > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.pruneLoop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func (r *Relay) pipeline(ctx context.Context) {
	errWait := r.cfg.PollInterval
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.cfg.Logger.Warn("tenurenats: relay batch failed", "relay", r.cfg.ID, "err", err)
			errWait = min(max(errWait*2, r.cfg.PollInterval), 5*time.Second)
			sleepCtx(ctx, errWait)
			continue
		}
		errWait = r.cfg.PollInterval
		if n < r.cfg.Batch {
			sleepCtx(ctx, r.cfg.PollInterval)
		}
	}
}

// RunOnce claims one batch, publishes it and marks what JetStream acknowledged. It returns
// the number of rows claimed. Run calls it in a loop; tools and tests may call it directly
// (while Run is not running or beside it: claims never overlap).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	token := uuid.New()
	q := natsdb.New(r.sch.Wrap(r.pool))
	claimedAt := time.Now()
	rows, err := q.OutboxClaim(ctx, natsdb.OutboxClaimParams{ClaimToken: token, ClaimedBy: r.cfg.ID,
		LeaseS: r.cfg.Lease.Seconds(), Batch: int32(r.cfg.Batch)})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	r.claimed.Add(int64(len(rows)))
	// From here on the rows are ours until the lease ends: finish even if ctx ends.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease+10*time.Second) // writes are fenced
	defer cancel()
	if time.Since(claimedAt) > r.cfg.Lease/2 {
		// A stall between the claim and the publish (GC, SIGSTOP): another relay may own the
		// rows soon; leave them to it rather than race it.
		return len(rows), nil
	}

	type sent struct {
		row natsdb.OutboxClaimRow
		fut jetstream.PubAckFuture
	}
	var failed []natsdb.OutboxClaimRow
	var errs []error
	inflight := make([]sent, 0, len(rows))
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
		msg := nats.NewMsg(row.Subject)
		msg.Data = row.Payload
		if len(row.Headers) > 2 {
			var h map[string][]string
			if err := json.Unmarshal(row.Headers, &h); err != nil {
				failed, errs = append(failed, row), append(errs, fmt.Errorf("headers: %w", err))
				continue
			}
			for k, vs := range h {
				for _, v := range vs {
					msg.Header.Add(k, v)
				}
			}
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(row.MsgID)}
		if r.cfg.Stream != "" {
			opts = append(opts, jetstream.WithExpectStream(r.cfg.Stream))
		}
		fut, err := r.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			failed, errs = append(failed, row), append(errs, err)
			continue
		}
		inflight = append(inflight, sent{row, fut})
	}
	if h := r.cfg.hooks.afterPublish; h != nil {
		h(ids)
	}
	timeout := time.NewTimer(r.cfg.PublishTimeout)
	defer timeout.Stop()
	var okIDs, okSeqs []int64
	var okStreams []string
wait:
	for _, s := range inflight {
		select {
		case ack := <-s.fut.Ok():
			r.published.Add(1)
			if ack.Duplicate {
				r.duplicates.Add(1)
			}
			okIDs, okSeqs, okStreams = append(okIDs, s.row.ID), append(okSeqs, int64(ack.Sequence)), append(okStreams, ack.Stream)
		case err := <-s.fut.Err():
			failed, errs = append(failed, s.row), append(errs, err)
		case <-timeout.C:
			break wait
		}
	}
	// Rows neither acknowledged nor failed by the timeout count as failed.
	if len(okIDs)+len(failed) < len(rows) {
		done := make(map[int64]bool, len(rows))
		for _, id := range okIDs {
			done[id] = true
		}
		for _, f := range failed {
			done[f.ID] = true
		}
		for _, row := range rows {
			if !done[row.ID] {
				failed, errs = append(failed, row), append(errs, fmt.Errorf("no acknowledgement within %v", r.cfg.PublishTimeout))
			}
		}
	}
	if h := r.cfg.hooks.afterAck; h != nil {
		h(okIDs)
	}
	var firstErr error
	if len(okIDs) > 0 {
		if err := r.mark(wctx, token, okIDs, okStreams, okSeqs); err != nil {
			firstErr = fmt.Errorf("mark sent: %w", err)
		}
	}
	for i, row := range failed {
		r.pubErrors.Add(1)
		delay := r.cfg.Retry.Delay(int(row.Attempts), worker.CodeRemoteError)
		msg := errs[i].Error()
		if len(msg) > 2000 {
			msg = msg[:2000]
		}
		if _, err := q.OutboxRetryLater(wctx, natsdb.OutboxRetryLaterParams{DelayS: delay.Seconds(), LastError: toValidUTF8(msg),
			ID: row.ID, ClaimToken: token}); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("retry later: %w", err)
		}
	}
	if len(failed) > 0 { // one line per batch, not per row
		r.cfg.Logger.Warn("tenurenats: publish failed; rows retried after a backoff", "relay", r.cfg.ID, "rows", len(failed),
			"first_outbox_id", failed[0].ID, "subject", failed[0].Subject, "attempt", failed[0].Attempts, "err", errs[0])
	}
	return len(rows), firstErr
}

// mark writes the fenced "sent" of the acknowledged rows in one transaction.
func (r *Relay) mark(ctx context.Context, token uuid.UUID, ids []int64, streams []string, seqs []int64) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op
	done, err := natsdb.New(r.sch.Wrap(tx)).OutboxMarkSent(ctx, natsdb.OutboxMarkSentParams{ClaimToken: token, Ids: ids, Streams: streams, Seqs: seqs})
	if err != nil {
		return err
	}
	if h := r.cfg.hooks.beforeCommit; h != nil {
		h(ids)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.marked.Add(int64(len(done)))
	if lost := len(ids) - len(done); lost > 0 {
		r.stale.Add(int64(lost))
		r.cfg.Logger.Warn("tenurenats: relay lost rows to another relay before marking them (JetStream dropped or will drop the duplicate by Nats-Msg-Id)",
			"relay", r.cfg.ID, "rows", lost)
	}
	return nil
}

func (r *Relay) pruneLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := pruneSent(ctx, r.pool, r.sch, r.cfg.Retention)
		r.pruned.Add(n)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("tenurenats: outbox pruning failed", "relay", r.cfg.ID, "err", err)
		}
	}
}

// PruneSent deletes outbox rows of schema "tenure" sent more than retention ago, in batches of
// 10,000, and returns how many it deleted. Relays call it every PruneEvery; call it yourself
// when no relay prunes (RelayConfig.Retention < 0). PruneSentIn is PruneSent in another
// schema.
func PruneSent(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	return PruneSentIn(ctx, pool, dbschema.Default, retention)
}

// PruneSentIn is PruneSent on the outbox of schema (RelayConfig.Schema). An invalid name is
// refused with a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
func PruneSentIn(ctx context.Context, pool *pgxpool.Pool, schema string, retention time.Duration) (int64, error) {
	sch, err := dbschema.New(schema)
	if err != nil {
		return 0, err
	}
	return pruneSent(ctx, pool, sch, retention)
}

func pruneSent(ctx context.Context, pool *pgxpool.Pool, sch *dbschema.Schema, retention time.Duration) (int64, error) {
	q := natsdb.New(sch.Wrap(pool))
	before := time.Now().Add(-retention)
	var total int64
	for {
		n, err := q.OutboxPruneSent(ctx, natsdb.OutboxPruneSentParams{Before: before, Batch: 10000})
		total += n
		if err != nil || n < 10000 {
			return total, err
		}
	}
}

// Pending returns the number of outbox rows of schema "tenure" not sent yet and the age of the
// oldest one (the relay's lag), on the database clock. PendingIn is Pending in another schema.
func Pending(ctx context.Context, pool *pgxpool.Pool) (int64, time.Duration, error) {
	return PendingIn(ctx, pool, dbschema.Default)
}

// PendingIn is Pending on the outbox of schema (RelayConfig.Schema). An invalid name is
// refused with a *migrations.InvalidSchemaError (migrations.ErrInvalidSchema).
func PendingIn(ctx context.Context, pool *pgxpool.Pool, schema string) (int64, time.Duration, error) {
	sch, err := dbschema.New(schema)
	if err != nil {
		return 0, 0, err
	}
	row, err := natsdb.New(sch.Wrap(pool)).OutboxPending(ctx)
	if err != nil {
		return 0, 0, err
	}
	return row.Pending, time.Duration(row.OldestAgeS * float64(time.Second)), nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// toValidUTF8 makes an error message storable as text: valid UTF-8, no NUL.
func toValidUTF8(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
