-- Flow control, far from a limit (issue 16): grants let claims of a queue far from its
-- concurrency limits start jobs without counting the running ones (worker/limits.go, "Grants").
-- One row per (queue, limit kind, stripe) of a limit without PerKey and without Rate: budget is
-- how many jobs claims on that stripe may still start unmarked (outside jobs_limited_idx);
-- spent bounds how many jobs such claims started that may still be running (a claim adds to
-- it, only an exact recount lowers it); max_running is the limit the budget was granted for.
-- Written by the exclusive limited claim (which holds every stripe and these rows) and
-- decremented by the grant claims of the stripe.
CREATE TABLE tenure.flow_grant (
    queue       text     NOT NULL,
    kind        text     NOT NULL,
    stripe      smallint NOT NULL,
    max_running integer  NOT NULL,
    budget      integer  NOT NULL DEFAULT 0,
    spent       integer  NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, kind, stripe),

    CONSTRAINT flow_grant_budget_pos CHECK (budget >= 0),
    CONSTRAINT flow_grant_spent_pos  CHECK (spent >= 0)
);
