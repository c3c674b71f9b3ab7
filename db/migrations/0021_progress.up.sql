-- Progress you can watch (issue 31 item 1): a running attempt's progress (worker.Progress:
-- {"done", "total", "msg", "at"}), written with its heartbeats and its finish, fenced like
-- them. A retry clears it; the failed attempt's error entry keeps it (and its output).
-- Finishes also NOTIFY tenure_done with the ids of jobs that reached a final state (no schema
-- object: jobs.Client.Wait listens on it).
ALTER TABLE tenure.jobs ADD COLUMN progress jsonb;
