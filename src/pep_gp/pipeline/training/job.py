"""A training job and its outcome: what :class:`~pep_gp.pipeline.training.trainer.Trainer` is asked to train
(:class:`TrainJob`) and what it returns (:class:`TrainResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import ModelSpec, get_model
from ..runs.config import TrainConfig


@dataclass(frozen=True)
class TrainJob:
    """What to train: a model (a registered name, or a spec) on a store (or in-memory data,
    :class:`~pep_gp.pipeline.data.datasets.ArrayData`), with a config, into a run directory (None: no checkpoints).
    The fields the config was not given take the model's own defaults (``spec.train_defaults``).
    ``new_rows_only``: a run resumed on a grown store takes its epochs over the new rows' blocks only
    (:mod:`pep_gp.pipeline.runs.growth`)."""

    model: str | ModelSpec
    store: Any
    config: TrainConfig
    run_dir: Path | None
    new_rows_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", self.config.with_defaults(self.spec.train_defaults))

    @property
    def spec(self) -> ModelSpec:
        return get_model(self.model) if isinstance(self.model, str) else self.model

    @property
    def model_name(self) -> str:
        return self.spec.name


@dataclass
class TrainResult:
    """The outcome of :func:`~pep_gp.pipeline.training.trainer.train` (up to its ``until_step``)."""

    params: Any
    steps: int
    total_steps: int
    epochs: int
    seconds: float
    checkpoint: Path
    history: list[dict[str, Any]]
    rejected_steps: int
    rejected_site_updates: int
    converged: bool  # the stopping rule's verdict on the step energies so far (see reported_converged)
    gain_per_row: float  # the rule's last window gain (inf before two windows)
    stops_early: bool  # the run ends when it converges (no epochs asked for)
    notes: tuple[str, ...] = ()  # what the trainer changed of the settings, e.g. M capped by the rows
    collapse: str | None = None  # how a finished run fell below its best (then params are the best's)
    stopped: str | None = None  # why a progress callback stopped the run (StopTraining's message)

    @property
    def reported_converged(self) -> bool:
        """What the run reports as converged: the stopping rule's verdict, not collapsed and not stopped."""
        return self.converged and self.collapse is None and self.stopped is None

    @property
    def finished(self) -> bool:
        return self.steps >= self.total_steps or (self.stops_early and self.converged) or self.stopped is not None

    @property
    def metrics(self) -> dict[str, Any]:
        """The held-out metrics of the last completed epoch."""
        last = self.history[-1] if self.history else {}
        return {k: v for k, v in last.items() if k in ("test_error", "test_nll", "rmse", "n_test")}
