-- harvest queue schema, version 9: which agent is storing a submission
-- (its sweep holder name; '' for one agent alone), so that on a database
-- several agents serve another agent takes over a keyed submission whose
-- agent died half way, and that agent, should it resume, cannot activate it.
ALTER TABLE jobs ADD COLUMN storer TEXT NOT NULL DEFAULT '';
