// Package logkey names the attributes of Tenure's log records, so that every package spells
// them the same way and an operator can filter on them (docs/operations.md, "Logs").
//
// Every record about one job carries JobID, Kind, Queue, Attempt and Generation (the
// worker's records get them from one helper); every record of a worker carries Worker (its
// logger is built With it). Known lists every key a Tenure log call may use;
// TestLogCallsUseKnownKeys fails on a call that uses any other.
package logkey

// The job's identity and attempt, on every record about one job.
const (
	JobID      = "job_id"     // int64: tenure.jobs.id
	Kind       = "kind"       // string: the job's kind
	Queue      = "queue"      // string: the job's queue (or, on queue-wide records, the queue)
	Attempt    = "attempt"    // int: the attempt number, 1 for the first (tenure.jobs.attempts)
	Generation = "generation" // int64: the fencing generation of this attempt
)

// Keys of the engine's own records.
const (
	Worker         = "worker"          // string: the worker's ID, on every record of a worker
	Err            = "err"             // error or string: what failed
	Code           = "code"            // string: the error code of a failed attempt (TIMEOUT, ...)
	Next           = "next"            // string: the transition a failed attempt takes (retry, dead)
	Delay          = "delay"           // duration: the backoff before the next attempt
	Transition     = "transition"      // string: the finish a stale or abandoned write carried
	PayloadVersion = "payload_version" // int: the job's payload version
	Jobs           = "jobs"            // int: how many jobs a batch record is about
	Try            = "try"             // int: the number of a retried engine write (not an attempt)
	NotLogged      = "not_logged_since_last"
)

// Known is every key a Tenure log call may use: the constants above, the operator-action keys
// of package jobs, and the keys of lifecycle records.
var Known = map[string]bool{
	JobID: true, Kind: true, Queue: true, Attempt: true, Generation: true,
	Worker: true, Err: true, Code: true, Next: true, Delay: true, Transition: true,
	PayloadVersion: true, Jobs: true, Try: true, NotLogged: true,
	// operator actions (jobs.Client)
	"outcome": true, "actor": true, "reason": true, "state": true,
	// workflow cancel (jobs.Client.CancelWorkflow): the workflow, tasks cancelled, cancels asked
	"workflow_id": true, "cancelled": true, "cancel_requested": true,
	// lifecycle and service records (worker)
	"queues": true, "kinds": true, "served": true, "deadline_in": true, "handlers_cancelled_in": true,
	"succeeded": true, "released": true, "stale_rejected": true, "abandoned": true, "dead": true,
	"handlers": true, "workers": true, "why": true, "running_for": true, "retry_in": true,
	"panic": true, "stack": true,
	// periodic schedules (worker/periodic.go)
	"schedule": true, "missed": true, "enqueued": true, "tick": true,
}
