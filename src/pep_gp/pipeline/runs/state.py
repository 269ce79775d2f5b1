"""The training loop's state and its checkpoints: what a checkpoint holds is everything the loop reads, so a
resumed run continues bit-for-bit as an uninterrupted one would (:mod:`pep_gp.pipeline.runs.checkpoint`
writes and reads the files)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import Handle, gathered, retained
from ..errors import InputError
from . import checkpoint
from .config import TrainConfig
from .manifest import RunManifest


@dataclass
class LoopState:
    """The loop's state: params, optimiser state, the step (which fixes the sampling position and the
    damping schedule), the RNG key, the epoch's running energy, the history, the counters, and the best
    parameters seen (those a step with the highest energy estimate started from) with the best window
    mean (:meth:`~pep_gp.pipeline.training.stopping.StoppingRule.collapsed` compares the last one with it)."""

    params: Any
    opt_state: Any
    key_data: np.ndarray
    step: int = 0
    rejected: int = 0
    rejected_in_a_row: int = 0  # steps rejected since the last accepted one (the stop rule's count)
    rejected_sites: int = 0
    epoch_energy: tuple[float, int] = (0.0, 0)  # sum and count of the finite step energies so far
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    last_energy: float = float("nan")
    energies: list[float] = field(default_factory=list)  # the latest step energies the stopping rule reads
    best_params: Any = None  # the params of the best step energy (None before an accepted step)
    best_energy: float = float("-inf")
    best_step: int = -1
    best_mean: float = float("-inf")  # the best window mean of the step energies

    def keep_best(self, params: Any, energy: float, window_mean: float) -> bool:
        """Record ``params`` (a step's handle retained: :func:`~pep_gp.pipeline.engine.retained`) if the step
        that started from them (``step``) had the best energy so far, and the window mean if it is the best so
        far; whether ``params`` were recorded."""
        if window_mean > self.best_mean:
            self.best_mean = window_mean
        if energy > self.best_energy:
            self.best_params, self.best_energy, self.best_step = retained(params), energy, self.step
            return True
        return False

    def gathered(self) -> LoopState:
        """This state with its params, optimiser state and best params as arrays (a step's handles gathered,
        :func:`~pep_gp.pipeline.engine.gathered`): what a checkpoint writes and a run returns."""
        parts = {"params": self.params, "opt_state": self.opt_state, "best_params": self.best_params}
        if not any(isinstance(part, Handle) for part in parts.values()):
            return self
        return dataclasses.replace(self, **{name: gathered(part) for name, part in parts.items()})


def save_state(run_dir: Path, state: LoopState, run: dict[str, Any], keep: int) -> Path:
    """Write the checkpoint of ``state``: its pytrees, and the manifest of the run's fields ``run`` (model,
    data, config, …) with the loop's record (what :func:`restored_state` reads back)."""
    manifest = RunManifest(**run, rejected_steps=state.rejected, rejected_in_a_row=state.rejected_in_a_row,
                           rejected_site_updates=state.rejected_sites, epoch_energy=state.epoch_energy,
                           history=state.history, seconds=state.seconds, recent_energies=state.energies,
                           best_energy=state.best_energy, best_step=state.best_step, best_mean=state.best_mean)
    trees = {"params": state.params, "opt_state": state.opt_state, "key": state.key_data,
             **({} if state.best_params is None else {"best_params": state.best_params})}
    return manifest.write(run_dir, state.step, trees, keep)


def refuse_another_run(manifest: RunManifest, run_dir: Path, model: str, checksum: str, path: str,
                       config: TrainConfig, earlier: Collection[str] = ()) -> None:
    """InputError unless ``manifest`` is of the same model and data (or of an ``earlier`` version of the
    data: a store grown by appends, :mod:`pep_gp.pipeline.runs.growth`), with a config that resumes to
    the same trajectory."""
    if manifest.dataset_checksum != checksum and manifest.dataset_checksum not in earlier:
        raise InputError(f"{run_dir}: this run was trained on {manifest.data} (checksum "
                         f"{manifest.dataset_checksum}), not on {path} (checksum "
                         f"{checksum}); resume with the same data or use a new --run-dir")
    if manifest.model != model:
        raise InputError(f"{run_dir}: this run trains --model {manifest.model}, not {model}")
    changed = manifest.config.incompatibilities(config)
    if changed:
        raise InputError(f"{run_dir}: cannot resume with a different config ({'; '.join(changed)}); "
                         "use the run's config or a new --run-dir")


def restored_state(restored: checkpoint.Restored) -> LoopState:
    """The loop state a checkpoint holds (a history value written as ``null`` is read back as NaN, a best
    energy or mean as −∞: none yet, or a checkpoint written before they were kept)."""
    meta, trees = RunManifest.of(restored.meta), restored.trees
    history = [{key: float("nan") if value is None else value for key, value in record.items()}
               for record in meta.history]
    worst = lambda value: float("-inf") if value is None else value
    return LoopState(trees["params"], trees["opt_state"], trees["key"], restored.step, meta.rejected_steps,
                     meta.rejected_in_a_row, meta.rejected_site_updates, meta.epoch_energy, history, meta.seconds,
                     energies=[float("nan") if e is None else e for e in meta.recent_energies],
                     best_params=trees.get("best_params"), best_energy=worst(meta.best_energy),
                     best_step=meta.best_step, best_mean=worst(meta.best_mean))
