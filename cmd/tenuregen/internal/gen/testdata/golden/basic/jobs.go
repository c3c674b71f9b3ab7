// Package basic exercises every rule and directive option of tenuregen.
package basic

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

//go:generate go run github.com/tenureq/tenure/cmd/tenuregen

// Item is one line of an order.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Lang is a language code.
type Lang string

// SendReceipt mails the receipt of an order.
//
//tenure:job kind=send_receipt version=3 queue=mail priority=2 max_attempts=10 lease=1m timeout=30s retry_base=100ms retry_cap=5m
type SendReceipt struct {
	OrderID int64  `json:"order_id" tenure:"required,min=1"`
	Email   string `json:"email" tenure:"required,max=254"`
	Lang    Lang   `json:"lang" tenure:"omitempty,oneof=en|ko|de"`
	Items   []Item `json:"items" tenure:"min=1,max=100"`
	Note    string `json:"note,omitempty"`
}

// SendReceiptV1 is the shape stored by version 1.
type SendReceiptV1 struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

//tenure:upgrade kind=send_receipt from=1
func upgradeSendReceiptV1(old SendReceiptV1) (SendReceiptV2, error) {
	return SendReceiptV2{OrderID: old.OrderID, Email: old.Email, Lang: "en"}, nil
}

// SendReceiptV2 is the shape stored by version 2.
type SendReceiptV2 struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
	Lang    string `json:"lang"`
}

// upgradeSendReceiptV2 adds an empty item list, on raw JSON.
//
//tenure:upgrade kind=send_receipt from=2
func upgradeSendReceiptV2(old json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(old, &m); err != nil {
		return nil, err
	}
	m["items"] = []Item{{SKU: "legacy", Qty: 1}}
	return json.Marshal(m)
}

type (
	// Charge charges a card.
	//
	//tenure:job kind=charge priority=3 lease=2m
	Charge struct {
		ID       uuid.UUID         `json:"id" tenure:"required"`
		Amount   int32             `json:"amount" tenure:"min=1,max=1000000"`
		Ratio    float64           `json:"ratio" tenure:"min=0,max=1.5"`
		Small    uint8             `json:"small" tenure:"max=200"`
		Code     int               `json:"code" tenure:"oneof=1|2|3"`
		Wait     time.Duration     `json:"wait" tenure:"min=1s,max=1h"`
		At       time.Time         `json:"at" tenure:"required"`
		Tags     []string          `json:"tags" tenure:"required"`
		Meta     map[string]string `json:"meta" tenure:"required"`
		Retry    *int              `json:"retry" tenure:"min=0,max=5"`
		Currency *string           `json:"currency" tenure:"required,oneof=EUR|USD"`
		Name     string            `tenure:"omitempty,min=2"`
		Extra    any               `json:"extra" tenure:"required"`
		internal chan int
		Skipped  func() `json:"-"`
	}

	// Ping has no rules and no options.
	//
	//tenure:job kind=ping
	Ping struct{}
)
