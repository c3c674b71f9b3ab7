// Package tenureui is Tenure's web dashboard: an http.Handler the application mounts under
// any path prefix, or that `tenure serve -ui` serves standalone.
//
// It shows what Tenure's data model knows: per queue and priority band the ready, scheduled,
// retrying, running (and lease-expired) and dead jobs, the oldest ready job's age and the
// queue-wait percentiles; completions per second over the last hour (an inline SVG drawn on
// the server); the worker registry (host, queues, heartbeat age, last success, throughput,
// stale completions rejected, leases lost); top error codes of dead jobs; periodic schedules;
// a keyset-paginated job list filtered by state, queue, kind, priority, creation time and a
// substring of the args; and a job page with its args, metadata, lease and claim token,
// generation, attempts timeline, effect-ledger rows and audit trail. A task of a workflow links
// to the workflow view (GET {Prefix}/workflows/{id}: its tasks in layers by depth, each with
// its state, the tasks it runs after and those it still waits on; the first 1,000 tasks of a
// larger workflow), a job of a sequence to the sequence view (GET {Prefix}/sequences?key=K:
// its jobs not succeeded yet, in order, the first running, next or holding the sequence).
//
// # Schema
//
// The dashboard works in one Tenure schema, "tenure" unless Config.Schema (or the schema of
// Config.Client) names another (docs/guide.md, "A schema of your own"): its own statements
// and the jobs.Client it acts through both run there, and a Schema that differs from the
// Client's is refused (ErrSchemaMismatch). `tenure serve -ui -schema S` serves schema S.
//
// # Read-only by default
//
// Mutations (cancel, retry now, re-inject, delete, bulk re-inject or cancel of a filtered set,
// pause and resume a queue) are off unless Config.EnableActions is set, and then every one
// asks Config.Authorizer, which names the actor; each needs a reason, and goes through the
// jobs.Client operator API, which records actor and reason in tenure.audit. There is no other
// write path: the dashboard runs no SQL of its own that changes anything.
//
// # Security
//
// Pages are html/template renderings, so job data (args, metadata, error messages, queue and
// kind names) is escaped in every context. Every response carries a strict
// Content-Security-Policy (script-src 'self', no inline script or style, no framing; the only
// script is an embedded static file). Every POST needs a CSRF token (a signed, double-submitted
// SameSite=Strict cookie) and passes net/http's cross-origin protection (Sec-Fetch-Site /
// Origin). BasicAuth and BasicAuthorizer give a simple user and password gate, as
// `tenure serve -ui` uses.
//
// # Cost
//
// The overview is one snapshot per Config.RefreshEvery, shared by every viewer, read from the
// partial indexes (ready, running, dead), the finished-jobs index (the wait window and the
// last hour) and the small registry tables. Open pages poll their live part once per
// RefreshEvery, and not while hidden. Job lists read ready, running or dead jobs through their
// partial indexes, and any other selection through bounded primary-key id windows
// (Config.ScanWindow × Config.ScanWindows ids per view at most), so a page stays fast on a
// table of tens of millions of finished jobs; a sparse match shows "Search older" to continue.
//
// Every page is bounded in bytes whatever the stored data: the statements read bounded heads
// of the stored JSON values (ValueChars characters; a ListPreviewChars preview on list pages;
// the search looks at SearchChars characters of args stored in at most SearchMaxStored
// bytes), in a read-only transaction bounded by Config.QueryTimeout, and the job page renders
// them indented down to MaxIndentDepth levels, cut to its share of MaxJobPageBytes, with a
// link to the raw value (GET {Prefix}/jobs/{id}/raw/{args|output|errors|metadata}, at most
// Config.MaxRawBytes). A list page is at most MaxListPageBytes(Config.PageSize).
package tenureui
