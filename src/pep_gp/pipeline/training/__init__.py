"""Training: the step, the trainer (the one loop), schedules, stopping and metrics; run directories are :mod:`pep_gp.pipeline.runs`."""
