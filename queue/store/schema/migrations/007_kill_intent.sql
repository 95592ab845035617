-- harvest queue schema, version 7: a cancel or an expiry marks the job
-- final and then kills its tasks in chunks; kill_states records, in the
-- same transaction as the job's new state, which task states are still to
-- be killed ('' when none), so that a crash between the two is finished
-- when the queue opens again (and by a repeated cancel). Jobs that a crash
-- of an older release left final with live tasks are finished too.
ALTER TABLE jobs ADD COLUMN kill_states TEXT NOT NULL DEFAULT '';
UPDATE jobs SET kill_states = 'WAITING,ASSIGNED,RUNNING,ZOMBIE' WHERE state = 'KILLED'
  AND EXISTS (SELECT 1 FROM tasks WHERE tasks.job_id = jobs.id AND tasks.state IN ('WAITING', 'ASSIGNED', 'RUNNING', 'ZOMBIE'));
UPDATE jobs SET kill_states = 'WAITING' WHERE state = 'ERROR_EW'
  AND EXISTS (SELECT 1 FROM tasks WHERE tasks.job_id = jobs.id AND tasks.state = 'WAITING');
