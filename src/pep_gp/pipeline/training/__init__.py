"""Training: the step, the trainer (the one loop), the engine, checkpoints, the config, schedules and metrics."""
