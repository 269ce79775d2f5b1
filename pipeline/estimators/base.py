"""What every estimator shares: the fit through the trainer — the same step and loop as ``pep train``,
in-process over in-memory arrays — and the standardisation of user-unit inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.training.config import TrainConfig
from pipeline.training.trainer import Trainer, TrainJob
from pipeline.data.blocks import input_statistics
from pipeline.data.datasets import ArrayData
from pipeline.training.engine import InProcess
from pipeline.models import ModelSpec


@dataclass(frozen=True)
class InputScaling:
    """``x ↦ (x − mean)/std``: user units to the model's (the training rows' statistics, as the trainer)."""

    mean: np.ndarray  # [D]
    std: np.ndarray  # [D]

    @classmethod
    def of(cls, data: ArrayData, standardize: bool) -> "InputScaling":
        return cls(*map(np.asarray, input_statistics(data.attrs, standardize)))

    def __call__(self, x) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) - self.mean) / self.std


def training_config(model_settings: dict[str, Any], *, rows_per_step: int, epochs: int, learning_rate: float,
                    standardize: bool, seed: int) -> TrainConfig:
    """A config for an in-memory fit: ``rows_per_step`` rows per step, each step one block."""
    return TrainConfig(model=model_settings, learning_rate=learning_rate, epochs=max(epochs, 1),
                       batch_size=rows_per_step, block_rows=rows_per_step, standardize=standardize, seed=seed,
                       checkpoint_every=max(epochs, 1))


def training_steps(n_rows: int, batch_size: int | None, max_iter: int, epochs: int | None) -> int:
    """The number of steps of a fit: ``max_iter``, or ``epochs`` passes of ``⌈n_rows/batch_size⌉``
    minibatches (a full batch when ``batch_size`` is None). ValueError naming a bad argument."""
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= n_rows):
        raise ValueError(f"batch_size must be None or an integer in 1..{n_rows}; got {batch_size!r}")
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative integer; got {max_iter!r}")
    if epochs is None:
        return int(max_iter)
    if not isinstance(epochs, (int, np.integer)) or epochs < 1:
        raise ValueError(f"epochs must be None or a positive integer; got {epochs!r}")
    return int(epochs) * -(-n_rows // (n_rows if batch_size is None else batch_size))


def fit_in_process(spec: ModelSpec, data: ArrayData, config: TrainConfig, steps: int,
                   initial_params: Any = None) -> dict[str, Any]:
    """Train ``spec`` on ``data`` for ``steps`` steps with the trainer (no run directory) and return the
    fitted attributes every estimator sets: ``params_``, ``energy_trace_`` (the energy estimate of every
    step), ``n_rejected_steps_`` (non-finite ascent steps skipped) and ``n_rejected_site_updates_``."""
    trainer = Trainer(TrainJob(spec, data, config, None), InProcess(), initial_params)
    energies: list[float] = []

    def record(event: str, **info: Any) -> None:
        if event == "step":
            energies.append(info["energy"])

    result = trainer.run(until_step=steps, progress=record)
    return {"params_": result.params, "energy_trace_": np.asarray(energies),
            "n_rejected_steps_": result.rejected_steps, "n_rejected_site_updates_": result.rejected_site_updates}
