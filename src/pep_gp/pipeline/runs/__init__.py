"""Run directories: a training run's configuration, checkpoints and manifest, its lock, its growth over an
appended store, its published versions, and the run opened as a model for prediction."""
