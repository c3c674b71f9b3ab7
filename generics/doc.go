// Package generics defines Tenure's typed job model: the Args contract every job args type
// satisfies (a kind and a payload version), JobRow (a job as stored, with its JobState: the
// one public job record, which jobs.Client returns and the engine runs every attempt on),
// Job[Args] as handed to a handler (the decoded args plus the attempt's *JobRow), and the
// per-kind Registry that encodes, decodes, upgrades and validates payloads.
//
// An args type is a plain struct with two methods:
//
//	type SendReceipt struct {
//		OrderID int64  `json:"order_id"`
//		Email   string `json:"email"`
//	}
//
//	func (SendReceipt) Kind() string        { return "send_receipt" }
//	func (SendReceipt) PayloadVersion() int { return 2 }
//
// Registering it (generics.Register[SendReceipt](reg, ...)) lets the registry upgrade
// payloads stored by older versions of the struct (WithUpgrader), validate them (an optional
// Validate() error method) and reject unknown fields, trailing data, oversized payloads and
// versions newer than the running code with typed errors (see PayloadError).
//
// cmd/tenuregen writes Kind, PayloadVersion, Validate and the registration code from struct
// tags, but everything here is usable by hand.
package generics
