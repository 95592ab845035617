-- harvest queue schema, version 8: the batch as the unit of work (issue 29).
-- A job's entries (its dataset's names) are written once; a pull hands
-- out grants (a range of one job's entries, one row) and moves the job's
-- counter row; an entry gets a row of its own only when it is an
-- exception: it failed, timed out, expired, was interrupted or killed
-- while handed out, or is being retried. The journal of version 6, the
-- per-task rows and the per-result rows go. Running tasks of the old
-- schema are requeued without an attempt charged. See docs/queue.md.

CREATE TABLE entries (
  job_id INTEGER NOT NULL,
  idx    INTEGER NOT NULL, -- 0-based; a task's protocol id is job_id << 32 | idx
  name   TEXT    NOT NULL,
  PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;

-- One narrow row per job that every hand-out and result moves (the jobs
-- row, with its command and paths, changes only with the job's state).
CREATE TABLE counts (
  job_id     INTEGER PRIMARY KEY,
  next_idx   INTEGER NOT NULL DEFAULT 0, -- entries below were handed out fresh (attempt 1)
  n_waiting  INTEGER NOT NULL DEFAULT 0, -- fresh ones above next_idx plus n_retry
  n_retry    INTEGER NOT NULL DEFAULT 0, -- exceptions WAITING to be handed out again
  n_active   INTEGER NOT NULL DEFAULT 0,
  n_done     INTEGER NOT NULL DEFAULT 0,
  n_failed   INTEGER NOT NULL DEFAULT 0,
  n_killed   INTEGER NOT NULL DEFAULT 0,
  n_requeued INTEGER NOT NULL DEFAULT 0  -- hand-outs beyond an entry's first
);

-- A grant: entries first_idx..last_idx of a job handed to a pool's master
-- under an epoch. settled has one character per entry: '-' no result yet,
-- 'D' done, 'R' another result recorded, 'X' closed without a result
-- (expired, killed, requeued). A grant is CLOSED when no entry is open.
-- done and failed count its results by status (JobPools). Attempt 0: a
-- row that only carries a job's per-pool figures from an older schema.
CREATE TABLE grants (
  id           INTEGER PRIMARY KEY,
  job_id       INTEGER NOT NULL,
  first_idx    INTEGER NOT NULL,
  last_idx     INTEGER NOT NULL,
  attempt      INTEGER NOT NULL,
  pool         TEXT    NOT NULL,
  epoch        INTEGER NOT NULL,
  pilot        TEXT    NOT NULL DEFAULT '',
  assigned_at  INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL,
  state        TEXT    NOT NULL, -- ASSIGNED, RUNNING, ZOMBIE, CLOSED
  settled      TEXT    NOT NULL,
  n_open       INTEGER NOT NULL,
  done         INTEGER NOT NULL DEFAULT 0,
  failed       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX grants_job ON grants(job_id, attempt, first_idx);
CREATE INDEX grants_live ON grants(pool, epoch) WHERE state != 'CLOSED';

-- Usage per owner per batch of results (the 24 h windows of fair share):
-- a batch appends one row per owner it served, in time order; rows older
-- than the window are deleted by the purge.
CREATE TABLE usage_log (
  id    INTEGER PRIMARY KEY,
  at    INTEGER NOT NULL,
  owner TEXT    NOT NULL,
  cpu_s REAL    NOT NULL,
  cost  REAL    NOT NULL
);
CREATE INDEX usage_log_at ON usage_log(at);

-- An exceptional entry. state: WAITING (to be handed out again), GRANTED
-- (handed out in grant_id), DONE, ERROR_E, EXPIRED, KILLED. tries counts
-- the attempts that failed, timed out or expired; status .. error_tail
-- describe the last of them (harvest failures).
CREATE TABLE exceptions (
  job_id      INTEGER NOT NULL,
  idx         INTEGER NOT NULL,
  state       TEXT    NOT NULL,
  attempt     INTEGER NOT NULL, -- its last hand-out
  tries       INTEGER NOT NULL DEFAULT 0,
  grant_id    INTEGER NOT NULL DEFAULT 0,
  queued_at   INTEGER NOT NULL DEFAULT 0,
  finished_at INTEGER NOT NULL DEFAULT 0,
  fail_attempt INTEGER NOT NULL DEFAULT 0,
  status      TEXT    NOT NULL DEFAULT '',
  exit_code   INTEGER NOT NULL DEFAULT 0,
  pool        TEXT    NOT NULL DEFAULT '',
  pilot       TEXT    NOT NULL DEFAULT '',
  started_at  INTEGER NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0,
  error_tail  TEXT    NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE INDEX exceptions_waiting ON exceptions(job_id, idx) WHERE state = 'WAITING';

-- The old tasks, numbered within their job.
CREATE TEMP TABLE old AS
  SELECT t.*, row_number() OVER (PARTITION BY t.job_id ORDER BY t.id) - 1 AS idx FROM tasks t;
INSERT INTO entries (job_id, idx, name) SELECT job_id, idx, name FROM old;

-- Every task handed out at least once lies below its job's next_idx, in
-- one closed grant of attempt 1 that says which of them are done; the
-- others below it are exceptions. Running tasks go back to waiting.
CREATE TEMP TABLE upto AS SELECT job_id, max(idx) + 1 AS n FROM old WHERE attempt > 0 GROUP BY job_id;
INSERT INTO counts (job_id, next_idx, n_waiting, n_retry, n_active, n_done, n_failed, n_killed, n_requeued)
  SELECT j.id, coalesce(u.n, 0),
    j.n_waiting + j.n_active,
    (SELECT count(*) FROM old o WHERE o.job_id = j.id AND o.idx < coalesce(u.n, 0) AND o.state IN ('WAITING', 'ASSIGNED', 'RUNNING', 'ZOMBIE')),
    0, j.n_done, j.n_failed, j.n_killed,
    (SELECT coalesce(sum(attempt - 1), 0) FROM old o WHERE o.job_id = j.id AND o.attempt > 1)
  FROM jobs j LEFT JOIN upto u ON u.job_id = j.id;
INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, assigned_at, heartbeat_at, state, settled, n_open)
  SELECT u.job_id, 0, u.n - 1, 1, '', 0, 0, 0, 'CLOSED',
    (SELECT group_concat(c, '') FROM (SELECT CASE WHEN o.state = 'DONE' THEN 'D' ELSE 'X' END AS c FROM old o
      WHERE o.job_id = u.job_id AND o.idx < u.n ORDER BY o.idx)), 0
  FROM upto u;
INSERT INTO exceptions (job_id, idx, state, attempt, tries, queued_at, finished_at, fail_attempt, status, exit_code, pool, pilot, started_at, duration_ms, error_tail)
  SELECT o.job_id, o.idx,
    CASE WHEN o.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') THEN 'WAITING' ELSE o.state END,
    o.attempt, o.tries, o.queued_at, o.finished_at,
    coalesce(CASE WHEN xp THEN 0 ELSE r.attempt END, 0), coalesce(CASE WHEN xp THEN 'expired' ELSE r.status END, ''),
    coalesce(CASE WHEN xp THEN 0 ELSE r.exit_code END, o.exit_code), coalesce(CASE WHEN xp THEN '' ELSE r.pool END, ''),
    coalesce(CASE WHEN xp THEN '' ELSE r.pilot END, ''), coalesce(CASE WHEN xp THEN 0 ELSE r.started_at END, 0),
    coalesce(CASE WHEN xp THEN 0 ELSE r.duration_ms END, 0), coalesce(CASE WHEN xp THEN o.last_error ELSE r.error_tail END, '')
  FROM (SELECT o.*, (o.tries > 0 AND (o.last_error = 'no heartbeat: expired' OR NOT EXISTS
      (SELECT 1 FROM results x WHERE x.task_id = o.id AND x.status IN ('failed', 'timeout') AND x.applied = 1))) AS xp FROM old o) o JOIN upto u ON u.job_id = o.job_id AND o.idx < u.n
  LEFT JOIN results r ON r.task_id = o.id AND r.attempt =
    (SELECT max(x.attempt) FROM results x WHERE x.task_id = o.id AND x.status IN ('failed', 'timeout') AND x.applied = 1)
  WHERE o.state != 'DONE' OR o.tries > 0;
-- A job's figures per pool, as grants of attempt 0 (no entries), and the
-- usage of the results: results are no longer kept one by one.
INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, assigned_at, heartbeat_at, state, settled, n_open, done, failed)
  SELECT job_id, 0, -1, 0, pool, 0, 0, 0, 'CLOSED', '', 0, done, failed FROM job_pools;
INSERT INTO usage_log (at, owner, cpu_s, cost)
  SELECT received_at, owner, sum(cpu_s), sum(cost) FROM results GROUP BY received_at, owner ORDER BY received_at, owner;
UPDATE jobs SET kill_states = '' WHERE kill_states != '' AND NOT EXISTS
  (SELECT 1 FROM exceptions x WHERE x.job_id = jobs.id AND x.state = 'WAITING');
UPDATE jobs SET kill_states = 'WAITING' WHERE kill_states != '';
DROP TABLE old;
DROP TABLE upto;
DROP TABLE tasks;
DROP TABLE results;
DROP TABLE journal;
DROP TABLE job_pools;
ALTER TABLE jobs DROP COLUMN n_waiting;
ALTER TABLE jobs DROP COLUMN n_active;
ALTER TABLE jobs DROP COLUMN n_done;
ALTER TABLE jobs DROP COLUMN n_failed;
ALTER TABLE jobs DROP COLUMN n_killed;

-- Each entry's state, derived (for people and tests; nothing on the hot
-- path reads it): an exception row says it, else its grant does, else it
-- waits (or was killed with its job).
CREATE VIEW tasks AS
SELECT (e.job_id << 32) | e.idx AS id, e.job_id, e.idx, e.name,
  CASE
    WHEN x.state IS NOT NULL AND x.state != 'GRANTED' THEN x.state
    WHEN g.id IS NULL THEN CASE WHEN j.state IN ('KILLED', 'ERROR_EW') THEN 'KILLED' ELSE 'WAITING' END
    WHEN substr(g.settled, e.idx - g.first_idx + 1, 1) = 'D' THEN 'DONE'
    ELSE g.state END AS state,
  coalesce(g.attempt, x.attempt, 0) AS attempt, coalesce(x.tries, 0) AS tries,
  coalesce(g.pool, '') AS pool, coalesce(g.epoch, 0) AS epoch, coalesce(g.id, 0) AS grant_id
FROM entries e JOIN jobs j ON j.id = e.job_id
LEFT JOIN exceptions x ON x.job_id = e.job_id AND x.idx = e.idx
LEFT JOIN grants g ON g.job_id = e.job_id AND CASE
    WHEN x.state = 'GRANTED' THEN g.id = x.grant_id
    WHEN x.state IS NULL THEN g.attempt = 1 AND e.idx BETWEEN g.first_idx AND g.last_idx
    ELSE 0 END;
