-- Several clusters (sites) share the queue: each site's pilots form a pool
-- with its own master lease, and every task records the pool it was handed
-- to. The one lease of version 1 becomes the lease of the site that hosts
-- the queue ('local', the default site name).
CREATE TABLE leases (
  pool       TEXT PRIMARY KEY,
  epoch      INTEGER NOT NULL,
  holder     TEXT    NOT NULL,
  address    TEXT    NOT NULL,
  expires_at INTEGER NOT NULL
);
INSERT INTO leases (pool, epoch, holder, address, expires_at) SELECT 'local', epoch, holder, address, expires_at FROM lease WHERE epoch > 0;
DROP TABLE lease;

ALTER TABLE tasks ADD COLUMN pool TEXT NOT NULL DEFAULT '';
UPDATE tasks SET pool = 'local' WHERE epoch > 0;
ALTER TABLE results ADD COLUMN pool TEXT NOT NULL DEFAULT '';

-- Done and failed attempts per job and pool: where a job's tasks ran.
CREATE TABLE job_pools (
  job_id INTEGER NOT NULL,
  pool   TEXT    NOT NULL,
  done   INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, pool)
) WITHOUT ROWID;
INSERT INTO job_pools (job_id, pool, done, failed)
  SELECT job_id, 'local', sum(state = 'DONE'), sum(state IN ('ERROR_E', 'EXPIRED')) FROM tasks WHERE epoch > 0 GROUP BY job_id;

-- The admin's settings of the sites other than the local one (whose floor
-- and cap stay in settings, as `harvest admin nodes` sets them).
CREATE TABLE sites (
  name       TEXT PRIMARY KEY,
  min_nodes  INTEGER NOT NULL DEFAULT 0,
  max_nodes  INTEGER NOT NULL DEFAULT 0,
  paused     INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);
