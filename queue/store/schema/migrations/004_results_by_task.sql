-- harvest queue schema, version 4: results are found by task when a job
-- is dropped, so the job_id index of results goes (one B-tree insert less
-- per result, in a page of its own when results of many jobs arrive).
DROP INDEX results_job;
