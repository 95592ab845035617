-- harvest queue schema, version 2: idempotent submissions. A submission
-- may carry an Idempotency-Key; a retry with the same key (same owner)
-- gets the first job instead of a second one. idem_hash is a digest of
-- the request, so a key reused for another request is refused.
ALTER TABLE jobs ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN idem_hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX jobs_idem ON jobs(owner, idem_key) WHERE idem_key != '';
