"""What a training run records in each checkpoint's manifest, validated before anything uses it, and the one
place that writes it.

A run directory may come from anywhere (copied from another machine, edited, damaged), so its manifest is
input like any other: :class:`RunManifest` checks every field the trainer, ``pep evaluate`` and the
resume logic read (types, finite statistics, ``x_std > 0``, a valid training config), and a manifest that
fails is a damaged checkpoint (:func:`pep_gp.pipeline.runs.checkpoint.restore` then tries the previous
one), never a ``KeyError`` or ``TypeError`` deep inside a run. The same type writes it
(:meth:`RunManifest.write`): the trainer's checkpoints (:func:`pep_gp.pipeline.runs.state.save_state`) and
``estimator.save`` build one and call it, so what is written is what a reader accepts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from . import checkpoint
from .checkpoint import one_line
from .config import TrainConfig

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class Targets(BaseModel):
    """Stored targets → model units: ``(y − shift) / scale``; one number each, or for ``P`` targets per row
    (a multi-output run) one per target, as many shifts as scales."""

    shift: float | list[float]
    scale: float | list[float]

    @field_validator("shift", "scale")
    @classmethod
    def _finite(cls, value: float | list[float], info: ValidationInfo) -> float | list[float]:
        """Finite numbers, and the scales positive: checked per entry, so the message is the entry's, not
        one per member of the union."""
        for entry in value if isinstance(value, list) else [value]:
            if not math.isfinite(entry):
                raise ValueError("Input should be a finite number")
            if info.field_name == "scale" and not entry > 0.0:
                raise ValueError("Input should be greater than 0")
        return value

    @model_validator(mode="after")
    def _one_per_target(self) -> "Targets":
        shape = [len(value) if isinstance(value, list) else None for value in (self.shift, self.scale)]
        if shape[0] != shape[1] or shape[0] == 0:
            raise ValueError(f"targets: expected one shift and one scale per target; got {self.shift} and "
                             f"{self.scale}")
        return self


class RunManifest(BaseModel):
    """The run's fields of a checkpoint manifest (the checkpoint's own ``format``/``step``/``leaves`` are
    checked by :class:`~pep_gp.pipeline.runs.checkpoint.CheckpointManifest`). The loop's record (its
    counters, energies, history and time) defaults to a loop that left none: a fitted estimator's save."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str
    model_binding: dict[str, Any] = Field(default_factory=dict)
    data: str
    dataset_checksum: str
    config: TrainConfig
    x_mean: list[FiniteFloat] = Field(min_length=1)
    x_std: list[PositiveFloat] = Field(min_length=1)
    targets: Targets
    total_steps: int = Field(ge=0)
    steps_per_epoch: int = Field(1, ge=1)
    rejected_steps: int = Field(0, ge=0)
    rejected_in_a_row: int = Field(0, ge=0)  # absent from manifests written before the stop rule
    rejected_site_updates: int = Field(0, ge=0)
    epoch_energy: tuple[float, int] = (0.0, 0)  # the running epoch's sum and count of finite step energies
    history: list[dict[str, Any]] = Field(default_factory=list)  # one record per epoch
    seconds: float = Field(0.0, ge=0.0)
    model_settings: dict[str, Any] | None = None  # as trained (M capped by the rows); absent before the cap
    parameterisation: str = "1"  # the model's parameters' meaning (ModelSpec.parameterisation); "1" before the tag
    recent_energies: list[float | None] = Field(default_factory=list)  # the stopping rule's window
    best_energy: float | None = None  # the best step energy (None: none yet, or written before it was kept)
    best_step: int = -1  # the step that started from the checkpoint's best_params (-1: none)
    best_mean: float | None = None  # the best window mean of the step energies
    converged: bool | None = None
    log_marginal_likelihood: float | None = None  # at the params (estimator.save, a run's last checkpoint)
    classes: list[Any] | None = None  # an estimator's labels in the user's values (estimator.save)
    feature_names: list[str] | None = None
    transforms: dict[str, Any] | None = None  # a table's rows → model features (pipeline.data.transforms)
    damping_per_epoch: bool = False  # the site step decays per epoch (False: written when it decayed per step)
    data_log: list[dict[str, Any]] | None = None  # the store versions trained on (pipeline.runs.growth)
    written_at: str | None = None  # when write wrote it (UTC, ISO 8601)

    @model_validator(mode="after")
    def _statistics_agree(self) -> "RunManifest":
        if len(self.x_mean) != len(self.x_std):
            raise ValueError(f"x_mean has {len(self.x_mean)} values, x_std {len(self.x_std)}")
        return self

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> "RunManifest":
        """The validated run fields of ``manifest``; ValueError naming the first bad field (one line)."""
        try:
            return cls(**manifest)
        except ValidationError as error:
            raise ValueError(one_line(error, "manifest")) from None

    def write(self, run_dir: Path, step: int, trees: Mapping[str, Any], keep: int) -> Path:
        """Write the checkpoint of ``step`` into ``run_dir``: the pytrees ``trees`` and this manifest, stamped
        with the time (:func:`~pep_gp.pipeline.runs.checkpoint.save`, which keeps the newest ``keep``
        checkpoints); returns its path. The one writer of a run's manifest."""
        written_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        meta = self.model_copy(update={"written_at": written_at}).model_dump()
        return checkpoint.save(run_dir, step, trees, meta, keep)
