// Package shopjobs holds the job args types of the shop example. Their Kind, PayloadVersion
// and Validate methods, the typed Enqueue helpers and the Handlers registration are generated
// into tenure_gen.go by cmd/tenuregen from the //tenure: directives and tenure tags below:
// run go generate after editing them (CI checks that the committed file is current).
package shopjobs

import "time"

//go:generate go run github.com/tenureq/tenure/cmd/tenuregen

// The example's queues: the main queue shared by charges, receipts and cleanups under a
// fairness policy, and a queue of its own for the slow reports.
const (
	QueueShop    = "shop"
	QueueReports = "reports"
)

// ChargeCard charges the order's card through the payment service, exactly once.
//
//tenure:job kind=shop.charge_card queue=shop priority=3 max_attempts=10 lease=30s timeout=10s retry_base=20ms retry_cap=500ms
type ChargeCard struct {
	OrderID     int64  `json:"order_id" tenure:"required,min=1"`
	AmountCents int64  `json:"amount_cents" tenure:"min=1,max=10000000"`
	Currency    string `json:"currency" tenure:"oneof=EUR|USD|KRW"`
	CardToken   string `json:"card_token" tenure:"required,max=64"`
}

// Item is one line of an order.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// SendReceipt mails the order's receipt. Version 2 added Lang. It is unique by order: a
// checkout that enqueues it again (a client retry) gets the existing job back, whether it is
// still waiting, running or already sent.
//
//tenure:job kind=shop.send_receipt version=2 queue=shop priority=2 max_attempts=10 lease=30s timeout=10s retry_base=20ms retry_cap=500ms unique=order_id unique_states=succeeded
type SendReceipt struct {
	OrderID int64  `json:"order_id" tenure:"required,min=1"`
	Email   string `json:"email" tenure:"required,max=254"`
	Lang    string `json:"lang" tenure:"oneof=en|ko|de"`
	Items   []Item `json:"items" tenure:"min=1,max=100"`
}

// SendReceiptV1 is the version-1 payload of shop.send_receipt, still written by the legacy
// checkout: it has no language.
type SendReceiptV1 struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
	Items   []Item `json:"items"`
}

// upgradeSendReceiptV1 turns a stored version-1 receipt into version 2.
//
//tenure:upgrade kind=shop.send_receipt from=1
func upgradeSendReceiptV1(old SendReceiptV1) (SendReceipt, error) {
	return SendReceipt{OrderID: old.OrderID, Email: old.Email, Lang: "en", Items: old.Items}, nil
}

// BuildReport aggregates a range of orders. It runs for Work, longer than its 2 s lease: the
// engine's heartbeat (every lease/3) keeps the lease alive while it runs.
//
//tenure:job kind=shop.build_report queue=reports priority=2 max_attempts=3 lease=2s timeout=30s
type BuildReport struct {
	FromOrder int64         `json:"from_order" tenure:"required,min=1"`
	ToOrder   int64         `json:"to_order" tenure:"required,min=1"`
	Work      time.Duration `json:"work" tenure:"min=0s,max=25s"`
}

// SalesSummary is the periodic "nightly" report, on a short interval for the demo: the sales
// up to its tick (worker.Config.Periodic schedules it; each tick is enqueued once).
//
//tenure:job kind=shop.sales_summary queue=reports priority=1 max_attempts=5 lease=30s timeout=10s
type SalesSummary struct {
	Tick   time.Time `json:"tick"`
	Missed int       `json:"missed" tenure:"min=0"`
}

// CleanupCart clears an order's cart: low priority, completed in the same transaction as
// its write (worker.CompleteTx).
//
//tenure:job kind=shop.cleanup_cart queue=shop priority=1 max_attempts=5 lease=30s timeout=10s
type CleanupCart struct {
	OrderID int64 `json:"order_id" tenure:"required,min=1"`
}
