-- harvest queue schema, version 5: a task's index entry by state moved at
-- every hand-out and every result (state is part of the key), one B-tree
-- page written per task each time, in a page of its own when the tasks of
-- many jobs move together. The job index never changes after insertion,
-- and the index of waiting tasks changes only when a task leaves or
-- re-enters WAITING; results of running tasks touch neither.
DROP INDEX tasks_job_state;
CREATE INDEX tasks_job ON tasks(job_id);
CREATE INDEX tasks_waiting ON tasks(job_id, id) WHERE state = 'WAITING';
