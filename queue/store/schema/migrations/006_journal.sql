-- harvest queue schema, version 6: the journal of the master's hot path.
-- A hand-out, a batch of results or a heartbeat appends one row here (a
-- few sequential pages) instead of rewriting a task, an index and a job
-- page per task; the rows it changed are folded into tasks, jobs, results
-- and job_pools later, sorted, in short transactions (overlay.go). Each
-- column is a JSON array of absolute rows (the rows' new values, not
-- increments), so replaying the journal in seq order after a crash is
-- exact, whatever part of it was folded before. AUTOINCREMENT: a seq is
-- never reused once the journal is emptied (the folder counts on order).
CREATE TABLE journal (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  t   TEXT NOT NULL DEFAULT '', -- tasks
  j   TEXT NOT NULL DEFAULT '', -- jobs
  r   TEXT NOT NULL DEFAULT '', -- results
  p   TEXT NOT NULL DEFAULT ''  -- job_pools
);
