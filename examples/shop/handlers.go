package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker"

	"github.com/tenureq/tenure/examples/shop/shopjobs"
)

// Salts of the deterministic fault injection.
const (
	saltCrash uint64 = 0x1111
	saltMail  uint64 = 0x2222
)

// shop implements shopjobs.Handlers: forgetting one of its methods would not compile where
// it is passed to shopjobs.RegisterHandlers.
type shop struct {
	pool *pgxpool.Pool
	pay  *paymentClient
	cfg  config

	chargeCalls   atomic.Int64 // effect functions run (remote calls attempted)
	ledgerReplays atomic.Int64 // attempts that found the charge in the ledger
	crashes       atomic.Int64 // injected failures after a recorded charge
	mailsSent     atomic.Int64
	mailFailures  atomic.Int64

	reportsMu      sync.Mutex
	reportsDone    int
	reportLongest  time.Duration
	reportShortest time.Duration
	reportLease    time.Duration
}

var _ shopjobs.Handlers = (*shop)(nil)

// ChargeCard charges the card through worker.Effect: the payment call carries the effect's
// stable key as its Idempotency-Key, and its result is recorded in the effect ledger, so a
// retried attempt (after a lost response, a crash or a reclaim) never charges twice. The
// order is then marked paid in the same transaction that completes the job.
func (s *shop) ChargeCard(ctx context.Context, job *generics.Job[shopjobs.ChargeCard]) error {
	a := job.Args
	res, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
		s.chargeCalls.Add(1)
		return s.pay.charge(ctx, call.Key, chargeRequest{OrderID: a.OrderID, AmountCents: a.AmountCents, Currency: a.Currency})
	})
	if err != nil {
		return err
	}
	if res.Replayed {
		s.ledgerReplays.Add(1)
	}
	if job.Attempt == 1 && chance(job.ID, job.Attempt, saltCrash) < s.cfg.CrashRate {
		// The charge is recorded; this attempt dies before marking the order paid.
		s.crashes.Add(1)
		return errors.New("simulated crash after the charge, before the order was updated")
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid', charge_id = $2 WHERE id = $1`, a.OrderID, res.Value)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return worker.Permanent(fmt.Errorf("order %d not found", a.OrderID))
		}
		return worker.CompleteTx(ctx, tx, job.JobRow)
	})
}

// SendReceipt "mails" the receipt. Some attempts fail transiently (a retryable code, or a
// rate limit with its own delay) and are retried with backoff.
func (s *shop) SendReceipt(ctx context.Context, job *generics.Job[shopjobs.SendReceipt]) error {
	r := chance(job.ID, job.Attempt, saltMail)
	switch {
	case r < s.cfg.MailFailRate:
		s.mailFailures.Add(1)
		return worker.WithCode(worker.CodeRemoteError, errors.New("smtp 451: try again later"))
	case r < s.cfg.MailFailRate*1.25:
		s.mailFailures.Add(1)
		return worker.RetryAfter(errors.New("smtp 421: too many connections"), 50*time.Millisecond)
	}
	s.mailsSent.Add(1)
	_, err := s.pool.Exec(ctx, `UPDATE orders SET receipt_sent_at = now(), receipt_lang = $2 WHERE id = $1`,
		job.Args.OrderID, job.Args.Lang)
	return err
}

// BuildReport works for Work (longer than its lease), checking its context between steps as
// every long handler should: the context ends if the lease is lost, the job is cancelled or
// the worker stops.
func (s *shop) BuildReport(ctx context.Context, job *generics.Job[shopjobs.BuildReport]) error {
	start := time.Now()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for time.Since(start) < job.Args.Work {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO reports (from_order, to_order, orders, paid, revenue_cents)
		SELECT $1, $2, count(*), count(*) FILTER (WHERE status = 'paid'), coalesce(sum(amount_cents) FILTER (WHERE status = 'paid'), 0)
		FROM orders WHERE id BETWEEN $1 AND $2
		ON CONFLICT (from_order) DO UPDATE SET to_order = excluded.to_order, orders = excluded.orders,
			paid = excluded.paid, revenue_cents = excluded.revenue_cents, built_at = now()`,
		job.Args.FromOrder, job.Args.ToOrder)
	if err != nil {
		return err
	}
	took := time.Since(start)
	s.reportsMu.Lock()
	s.reportsDone++
	s.reportLongest = max(s.reportLongest, took)
	if s.reportShortest == 0 || took < s.reportShortest {
		s.reportShortest = took
	}
	s.reportLease = job.Lease
	s.reportsMu.Unlock()
	return nil
}

// SalesSummary records the sales up to its tick. It runs at least once per tick (a retry
// repeats it): the tick is the key of its row, so a repeat updates the same row.
func (s *shop) SalesSummary(ctx context.Context, job *generics.Job[shopjobs.SalesSummary]) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO sales_summaries (tick, missed, orders, paid, revenue_cents)
		SELECT $1, $2, count(*), count(*) FILTER (WHERE status = 'paid'), coalesce(sum(amount_cents) FILTER (WHERE status = 'paid'), 0)
		FROM orders WHERE created_at <= $1
		ON CONFLICT (tick) DO UPDATE SET orders = excluded.orders, paid = excluded.paid,
			revenue_cents = excluded.revenue_cents, built_at = now()`,
		job.Args.Tick, job.Args.Missed)
	return err
}

// CleanupCart clears the cart and completes the job in one transaction: either both happen
// or neither does.
func (s *shop) CleanupCart(ctx context.Context, job *generics.Job[shopjobs.CleanupCart]) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET cleaned_at = now() WHERE id = $1`, job.Args.OrderID); err != nil {
			return err
		}
		return worker.CompleteTx(ctx, tx, job.JobRow)
	})
}
