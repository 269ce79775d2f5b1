"""Resuming a run: which checkpoint a run continues from, and the runs it refuses to continue.

A run directory that holds checkpoints is continued only when asked (``--resume``), and only by the same
run: a checkpoint of another model, another store (or not an earlier version of it: a grown store,
:mod:`pep_gp.pipeline.runs.growth`), another parameterisation or a config that trains another trajectory
is refused (:func:`~pep_gp.pipeline.runs.state.refuse_another_run`), and so are two runs this pep would
continue as another model: one whose settings the same config now decides otherwise (a changed default,
``likelihood = "auto"``), and a minibatch run whose site step decayed per step (a pep before
``damping_per_epoch``). What is restored is the loop's whole state (:mod:`pep_gp.pipeline.runs.state`),
so a resumed run continues bit-for-bit; on a grown store its ``data_log`` gains an entry, and the
stopping rule's window and the best energy start again there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..models import ModelSettings, ModelSpec
from ..models.protocol import uses_site_updates
from . import checkpoint
from .config import TrainConfig
from .growth import data_log, earlier_versions, grown_entry
from .manifest import RunManifest
from .run import check_parameterisation
from .state import LoopState, refuse_another_run, restored_state


@dataclass(frozen=True)
class Resumed:
    """The state a run starts from: ``path`` is the checkpoint it resumed (None: a fresh start), ``data_log``
    the run's store versions then (None: a fresh start's, as the trainer has it)."""

    state: LoopState
    path: Path | None = None
    data_log: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ResumeRules:
    """What a run in ``run_dir`` must agree with to be continued: its spec and settings (as decided here),
    its config, its store, the steps of an epoch and the rows of a block; ``new_rows_only`` (``pep train
    --new-rows-only``) needs a store grown since the checkpoint."""

    run_dir: Path
    spec: ModelSpec
    settings: ModelSettings
    config: TrainConfig
    store: Any
    steps_per_epoch: int
    block_rows: int
    new_rows_only: bool = False

    def start(self, resume: bool, fresh: Callable[[], LoopState]) -> Resumed:
        """The state to start from: the newest intact checkpoint's when ``resume`` (and there is one), else
        ``fresh()`` (called in either case: its pytrees are the templates a checkpoint is read into).

        Raises:
            InputError: checkpoints exist and ``resume`` is False, or they are of another run.
        """
        if not resume and checkpoint.has_checkpoints(self.run_dir):
            raise InputError(f"{self.run_dir}: already holds checkpoints; pass --resume to continue that run "
                             "or choose a new --run-dir")
        initial = fresh()
        restored = checkpoint.restore(self.run_dir, lambda raw: self.templates(raw, initial)) if resume else None
        if restored is None:
            return Resumed(initial)
        state, manifest = restored_state(restored), RunManifest.of(restored.meta)
        log, store = data_log(manifest), self.store
        if self.new_rows_only and manifest.dataset_checksum == store.checksum and len(log) == 1:
            raise InputError(f"--new-rows-only: {store.path} has not grown since {restored.path} (append rows "
                             "with `pep ingest … --append` first)")
        if manifest.dataset_checksum != store.checksum:  # the store grew since this checkpoint
            log.append(grown_entry(log, restored.step, store, manifest.dataset_checksum, self.block_rows,
                                   self.new_rows_only, state.history))
            state.energies, state.epoch_energy = [], (0.0, 0)
            state.best_params, state.best_energy, state.best_step, state.best_mean = None, float("-inf"), -1, float("-inf")
        return Resumed(state, restored.path, log)

    def templates(self, raw: dict[str, Any], fresh: LoopState) -> dict[str, Any]:
        """The pytrees to restore a checkpoint of manifest ``raw`` into, after refusing another run's
        checkpoint (InputError; ValueError for an invalid manifest, a damaged checkpoint)."""
        manifest = RunManifest.of(raw)
        check_parameterisation(manifest, self.spec)
        self.refuse_per_step_damping(manifest)
        refuse_another_run(manifest, self.run_dir, self.spec.name, self.store.checksum, self.store.path,
                           self.config, earlier_versions(self.store))
        self.refuse_other_settings(manifest)
        best = {"best_params": fresh.params} if manifest.best_step >= 0 else {}
        return {"params": fresh.params, "opt_state": fresh.opt_state, "key": fresh.key_data, **best}

    def refuse_other_settings(self, manifest: RunManifest) -> None:
        """InputError when the run trained with other model settings than the same config gives here: a default
        that changed, or a setting left to the data (``likelihood = "auto"``) decided otherwise, by the pep that
        wrote it. Resumed, its parameters would go on training as another model."""
        if manifest.model_settings is None:
            return
        ours = self.settings.model_dump(mode="json")
        changed = [f"{name}: {value!r} → {ours[name]!r}" for name, value in sorted(manifest.model_settings.items())
                   if name in ours and ours[name] != value]
        if changed:
            raise InputError(f"{self.run_dir}: this run trained with other model settings than its config gives "
                             f"here ({'; '.join(changed)}); set them in the config's [model] table to resume it, or "
                             "use a new --run-dir")

    def refuse_per_step_damping(self, manifest: RunManifest) -> None:
        """InputError for a minibatch run with decaying site steps written when ``damping_decay`` was per step
        (before ``damping_per_epoch``): resumed here its damping would jump to the per-epoch schedule's."""
        settings, per_epoch = self.settings, self.steps_per_epoch
        if (manifest.damping_per_epoch or per_epoch == 1 or not uses_site_updates(self.spec, settings)
                or settings.damping_decay == 1.0):
            return
        raise InputError(f"{self.run_dir}: this run's site step decayed by damping_decay = "
                         f"{settings.damping_decay:g} per step (a pep before the decay per epoch); this pep decays it "
                         f"per epoch ({per_epoch} steps), so it cannot resume the run: retrain in a new --run-dir")
