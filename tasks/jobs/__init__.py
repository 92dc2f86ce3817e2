"""A job's set-up, what a user runs before scoring: a new job scaffolded from sample data, a model
registered as a version, every input cross-checked; and the jobs and partition dates people pick.

Registration is here, not in tasks/inference/, because it fits the calibration from tasks.prediction,
which the inference layer may not import."""
