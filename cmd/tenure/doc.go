// Command tenure is Tenure's command-line tool.
//
// Usage:
//
//	tenure <command> [arguments]
//
// Commands that talk to PostgreSQL take the connection URL from -database-url, else from
// $DATABASE_URL. Flags may come before or after a job id. Exit codes: 0 on success, 1 when the
// command failed, 2 on a usage error (a bad flag prints one line and a pointer to -h).
//
// # migrate
//
//	tenure migrate up                apply every pending migration
//	tenure migrate down [-steps N]   roll back the N most recent migrations (default 1)
//	tenure migrate status            list the migrations and whether each is applied
//
// Migrations run one per transaction under an advisory lock, so several instances may run
// "migrate up" at once. A database migrated by a newer tenure is refused (exit code 1); status
// lists its unknown versions as UNKNOWN and warns. A worker refuses to Start on a database
// whose schema is behind (worker.ErrSchemaBehind) or ahead (worker.ErrSchemaAhead).
//
// # jobs
//
// Reading:
//
//	tenure jobs list [-state S] [-kind K] [-queue Q] [-code C] [-limit N] [-after ID] [-json]
//	    jobs in id order, one page at a time (-limit, default 50); "(more: -after ID)" ends a
//	    page that has a next one. S is ready, running, succeeded, dead or cancelled; C a last
//	    error code such as TIMEOUT or LEASE_EXPIRED.
//	tenure jobs get ID [-json]
//	    one job: queue, kind, payload, state, attempts, generation, lease, owner, and its
//	    error history.
//	tenure jobs stats [-window D] [-unserved-after D] [-json]
//	    per queue and priority (sorted by queue, then highest priority first): ready,
//	    scheduled, running and dead counts, the oldest ready job's age, and the queue-wait
//	    percentiles of the jobs finished within -window (default 5m); then the most frequent
//	    error codes of dead jobs. A queue with ready jobs, none running, and its oldest ready
//	    job older than -unserved-after (default 1m) is marked UNSERVED? and a warning goes to
//	    stderr: most likely no worker has it in worker.Config.Queues (busy or restarting
//	    workers look the same for a while; there is no worker registry to ask).
//	tenure jobs audit [ID] [-limit N] [-after ID]
//	    audited operator actions, oldest first (of one job when ID is given).
//
// Acting (each is audited with who and why: -actor and -reason are required):
//
//	tenure jobs cancel ID -actor A -reason R
//	    a ready job is cancelled at once; the worker of a running one cancels its handler's
//	    context and ends it cancelled.
//	tenure jobs retry ID -actor A -reason R
//	    a ready job (scheduled, or waiting out a retry backoff) becomes due now, keeping its
//	    attempts; a dead or cancelled job goes back to ready with a fresh attempt budget. A
//	    running or succeeded job is refused.
//	tenure jobs reinject ID -actor A -reason R [-max-attempts N]
//	    a dead job goes back to ready with a fresh attempt budget (N to change it).
//	tenure jobs delete ID -actor A -reason R
//	    deletes a job that is not running (cancel a running one first), with its
//	    effect-ledger rows; the audit row keeps its queue, kind, state and payload.
//
// -json prints list (a page: Jobs and NextAfterID), get (the job) and stats (Bands,
// TopDeadCodes and Unserved) as JSON, with the field names of package jobs' types; durations
// are in nanoseconds.
//
// # queue
//
//	tenure queue list
//	    queues an operator paused or resumed and queues live workers serve: state (running or
//	    PAUSED), live workers serving it, since when, by whom and why.
//	tenure queue pause QUEUE -actor A -reason R
//	    every worker stops starting claims from QUEUE within about a second (NOTIFY, else its
//	    1 s poll); running jobs finish normally; enqueues are still accepted. Survives restarts.
//	tenure queue resume QUEUE -actor A -reason R
//	    workers claim from QUEUE again. Both are audited (actions pause and resume).
//
// # periodic
//
//	tenure periodic list
//	    the periodic schedules (worker.Config.Periodic): name, spec, kind, queue, next run,
//	    last job id, its tick and enqueue time, missed ticks; OVERDUE when no worker runs it.
//
// # serve
//
//	tenure serve [-addr A] [-ui [-ui-user U [-ui-actions]]]
//	    cluster metrics on http://A/metrics (default 127.0.0.1:9464); with -ui also the web
//	    dashboard (package tenureui) on http://A/ui/, read-only unless -ui-actions. -ui-user
//	    puts the dashboard behind HTTP basic auth (password from $TENURE_UI_PASSWORD); the user
//	    is the actor recorded for each action. -ui-actions requires -ui-user.
package main
