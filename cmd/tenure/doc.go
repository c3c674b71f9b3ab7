// Command tenure is Tenure's command-line tool. It is a module of its own
// (github.com/tenureq/tenure/cmd/tenure: it brings the dashboard and Prometheus, which the core
// module does not require): add it to a module as a tool and run it with go tool,
//
//	go get -tool github.com/tenureq/tenure/cmd/tenure
//	DATABASE_URL=postgres://... go tool tenure migrate up
//
// or, inside Tenure's repository, go run ./cmd/tenure.
//
// Usage:
//
//	tenure <command> [arguments]
//
// Commands that talk to PostgreSQL take the connection URL from -database-url, else from
// $DATABASE_URL. Flags may come before or after a job id. Exit codes: 0 on success, 1 when the
// command failed, 2 on a usage error (a bad flag prints one line and a pointer to -h).
//
// A connection URL is never printed with its password: an invalid one is shown with every
// part that could be the password replaced by xxxxx, and a URL that the driver would read with
// another password than the one written (postgres://u:p@ss@host is read as password "p" at
// host "ss@host") is refused: percent-encode @ : / ? # % and spaces in a URL password, or quote
// a keyword/value one (password='...').
//
// Every database command works in schema -schema, else $TENURE_SCHEMA, else tenure
// (docs/guide.md §22), serve included: its metrics and dashboard read that schema.
//
// Every command but migrate checks the schema when it connects: on a database never migrated,
// or behind this binary, it fails with "run `tenure migrate up` or call migrations.Up(ctx,
// pool)" (migrations.ErrNotMigrated); one migrated by a newer release gets a warning.
//
// Values read from the database (kinds, queues, payloads, error messages, actors, reasons,
// hosts, ...) and error messages are printed with control characters escaped: C0 controls
// (tab and newline included), DEL, C1 controls, bidi controls and invalid UTF-8 show as \xNN,
// \t, \n, \r or \uNNNN, so no stored value can drive the terminal or forge a line. -json
// prints the exact values.
//
// # migrate
//
//	tenure migrate up                apply every pending migration
//	tenure migrate down [-steps N] [-yes]
//	                                 roll back the N most recent migrations (default 1)
//	tenure migrate status            list the migrations and whether each is applied
//
// Migrations run one per transaction under an advisory lock, so several instances may run
// "migrate up" at once. A database migrated by a newer tenure is refused (exit code 1); status
// lists its unknown versions as UNKNOWN and warns. A worker refuses to Start on a database
// whose schema is behind (worker.ErrSchemaBehind) or ahead (worker.ErrSchemaAhead).
//
// down first prints the migrations it will revert, newest first (all applied ones when -steps
// exceeds their number, which it says), and the tables their down scripts drop with every row
// in them; then it asks for "yes" on the terminal. -yes skips the question, for scripts;
// without a terminal on stdin and without -yes it refuses (exit code 2) and reverts nothing.
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
//	    workers look the same for a while; there is no worker registry to ask). Kinds that
//	    delete on success (as their workers publish it) are listed under DELETES ON SUCCESS:
//	    their succeeded jobs leave no row, so FINISHED counts none of them.
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
// # JSON output
//
// -json prints list, get and stats as JSON in a stable schema: the names below are a contract
// (renaming or removing one is a breaking change; fields may be added). Every field is always
// present: null when it has no value, [] or {} when empty. Times are RFC 3339 strings in UTC
// (with fractional seconds when not whole); durations are numbers of seconds (float), in
// fields named *_seconds. payload and output are the job's JSON as stored.
//
//	job (get; each of list's jobs): id, queue, kind, payload, payload_version, state, priority,
//	    run_at, attempts, max_attempts, lease_seconds, locked_by, locked_until, claim_token,
//	    generation, attempted_at, last_error_code, errors (a list of {attempt, generation, code,
//	    message, at}), created_at, updated_at, finished_at, cancel_requested_at, metadata (an
//	    object of strings), tags (a list of strings), output, snoozes, unique_key (hex),
//	    unique_states (a list of states), workflow_id, task_name, sequence_key (null when the job
//	    is in no workflow or sequence), deps_pending (unresolved dependencies of a waiting job),
//	    progress ({done, total, msg, at}: the running or
//	    last attempt's worker.Progress), elapsed_seconds (how long the running or last
//	    attempt ran), timeout_seconds (the kind's handler timeout its workers publish; get only,
//	    null in lists); each errors entry also has output and progress (what that failed
//	    attempt recorded)
//	list: {"jobs": [job...], "next_after_id": the -after of the next page, null on the last}
//	stats: window_seconds, bands (a list of {queue, priority, ready, scheduled, running,
//	    cancel_requested, dead, oldest_ready_age_seconds, ready_age_p50_seconds,
//	    ready_age_p95_seconds, finished, succeeded, wait_p50_seconds, wait_p95_seconds,
//	    wait_p99_seconds, queue_served, unserved_jobs}), top_dead_codes (a list of {queue, kind,
//	    code, jobs}), unserved (a list of {queue, ready, oldest_ready_age_seconds}: the
//	    heuristic of -unserved-after), unserved_kinds (a list of {queue, kind, ready,
//	    queue_served, kind_registered}: ready jobs no live worker can run, from the worker
//	    registry and the kinds workers publish), delete_on_success_kinds (the kinds workers
//	    publish as deleting their succeeded jobs: those leave no row, so finished and
//	    succeeded count none of them; docs/guide.md §28)
//
// # workflow
//
//	tenure workflow get ID [-json]
//	    a workflow's tasks (ID: the workflow's UUID, shown by tenure jobs get on each task) by
//	    depth (0: no dependencies; else 1 + the deepest dependency), each with its job id,
//	    kind, state and attempts, the tasks it depends on (DEPENDS_ON) and, while it is
//	    waiting, those not resolved yet (WAITING_ON). -json: {id, name, states (count per
//	    state), tasks (a list of {task, id, depth, kind, queue, state, attempts, max_attempts,
//	    deps_pending, depends_on, waiting_on, run_at, attempted_at, finished_at,
//	    last_error_code, output}), edges (a list of {dep_id, job_id, on_failure, resolved})}.
//	tenure workflow cancel ID -actor A -reason R
//	    cancels every task that has not run (ready or waiting) and asks the workers of running
//	    ones to cancel them (their handler's context); finished tasks stay as they are. One
//	    audit row (action cancel, the workflow id and the task ids in its detail).
//
// # queue
//
//	tenure queue list
//	    queues an operator paused or resumed and queues live workers serve: state (running or
//	    PAUSED), live workers serving it, since when, by whom and why.
//	tenure queue pause QUEUE -actor A -reason R [-force]
//	    every worker stops starting claims from QUEUE within about a second (NOTIFY, else its
//	    1 s poll); running jobs finish normally; enqueues are still accepted. Survives restarts.
//	tenure queue resume QUEUE -actor A -reason R [-force]
//	    workers claim from QUEUE again. Both are audited (actions pause and resume). A queue
//	    that no live worker serves, with no ready, running or dead job, no periodic schedule,
//	    and not paused, is refused as a probable typo (exit code 1, nothing written) unless
//	    -force.
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
//	    is the actor recorded for each action. -ui-actions requires -ui-user. It checks the
//	    schema before it listens and refuses a database not migrated (or behind).
package main
