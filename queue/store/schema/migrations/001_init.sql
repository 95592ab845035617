-- harvest queue schema, version 1. Times are Unix milliseconds.
CREATE TABLE users (
  name         TEXT PRIMARY KEY,
  priority     REAL    NOT NULL,
  max_cores    INTEGER NOT NULL,
  max_cpu_time REAL    NOT NULL,
  max_cost     REAL    NOT NULL,
  created_at   INTEGER NOT NULL
);

-- Flushed from memory in short per-user writes; recomputed by the reconciler.
CREATE TABLE usage (
  user              TEXT PRIMARY KEY,
  running_cores     INTEGER NOT NULL DEFAULT 0,
  cpu_24h           REAL    NOT NULL DEFAULT 0,
  cost_24h          REAL    NOT NULL DEFAULT 0,
  computed_priority REAL    NOT NULL DEFAULT 0,
  updated_at        INTEGER NOT NULL
);

CREATE TABLE tokens (
  hash       TEXT PRIMARY KEY,  -- hex sha256 of the token
  user       TEXT NOT NULL,
  role       TEXT NOT NULL,
  created_at INTEGER NOT NULL
);

CREATE TABLE jobs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  owner        TEXT    NOT NULL,
  name         TEXT    NOT NULL DEFAULT '',
  state        TEXT    NOT NULL,
  dataset      TEXT    NOT NULL,
  output_dir   TEXT    NOT NULL,
  command      TEXT    NOT NULL, -- JSON argv
  batch_size   INTEGER NOT NULL,
  price        REAL    NOT NULL,
  cores        INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  timeout_s    INTEGER NOT NULL,
  submitted_at INTEGER NOT NULL,
  started_at   INTEGER NOT NULL DEFAULT 0,
  finished_at  INTEGER NOT NULL DEFAULT 0,
  expires_at   INTEGER NOT NULL,
  cancelled_at INTEGER NOT NULL DEFAULT 0,
  n_total      INTEGER NOT NULL DEFAULT 0,
  n_waiting    INTEGER NOT NULL DEFAULT 0,
  n_active     INTEGER NOT NULL DEFAULT 0,
  n_done       INTEGER NOT NULL DEFAULT 0,
  n_failed     INTEGER NOT NULL DEFAULT 0,
  n_killed     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_state ON jobs(state);
CREATE INDEX jobs_owner ON jobs(owner, id);
CREATE INDEX jobs_cancelled ON jobs(cancelled_at) WHERE cancelled_at > 0;

CREATE TABLE tasks (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id       INTEGER NOT NULL,
  name         TEXT    NOT NULL,
  state        TEXT    NOT NULL,
  attempt      INTEGER NOT NULL DEFAULT 0, -- number of the current/last hand-out
  tries        INTEGER NOT NULL DEFAULT 0, -- attempts counted against max_attempts
  epoch        INTEGER NOT NULL DEFAULT 0,
  pilot        TEXT    NOT NULL DEFAULT '',
  queued_at    INTEGER NOT NULL,
  assigned_at  INTEGER NOT NULL DEFAULT 0,
  heartbeat_at INTEGER NOT NULL DEFAULT 0,
  finished_at  INTEGER NOT NULL DEFAULT 0,
  wait_ms      INTEGER NOT NULL DEFAULT 0,
  exit_code    INTEGER NOT NULL DEFAULT 0,
  last_error   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX tasks_job_state ON tasks(job_id, state, id);
CREATE INDEX tasks_active ON tasks(heartbeat_at) WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE');

-- One row per reported (task, attempt): the idempotency key, and the
-- source of the 24 h usage windows.
CREATE TABLE results (
  task_id     INTEGER NOT NULL,
  attempt     INTEGER NOT NULL,
  job_id      INTEGER NOT NULL,
  owner       TEXT    NOT NULL,
  status      TEXT    NOT NULL,
  exit_code   INTEGER NOT NULL,
  started_at  INTEGER NOT NULL,
  duration_ms INTEGER NOT NULL,
  pilot       TEXT    NOT NULL DEFAULT '',
  error_tail  TEXT    NOT NULL DEFAULT '',
  cpu_s       REAL    NOT NULL,
  cost        REAL    NOT NULL,
  received_at INTEGER NOT NULL,
  applied     INTEGER NOT NULL,
  PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;
CREATE INDEX results_received ON results(received_at);
CREATE INDEX results_job ON results(job_id);

CREATE TABLE lease (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  epoch      INTEGER NOT NULL,
  holder     TEXT    NOT NULL,
  address    TEXT    NOT NULL,
  expires_at INTEGER NOT NULL
);
INSERT INTO lease (id, epoch, holder, address, expires_at) VALUES (1, 0, '', '', 0);

CREATE TABLE settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
