"""The trainer: the one training loop of pep, around :mod:`pep_gp.pipeline.training.step`.

Each step ``s`` the minibatch schedule picks the blocks of ``s`` (:mod:`pep_gp.pipeline.training.sampling`) and
the step's ``update`` runs on them through the engine (Dask workers or this process); at the end of every epoch
the trainer records the epoch's mean energy and the held-out metrics, and every ``checkpoint_every`` steps and at
the end it writes a checkpoint of its state (:mod:`pep_gp.pipeline.runs.state`), so a resumed run
(:mod:`pep_gp.pipeline.runs.resume`) continues bit-for-bit. While it runs it holds the run directory's lock
(:mod:`pep_gp.pipeline.runs.lock`). A run fails loudly rather than idle, and one that ends collapsed ends at its
best parameters (:mod:`pep_gp.pipeline.training.endings`). The estimators run this same trainer over in-memory
arrays (:mod:`pep_gp.pipeline.data.datasets`), without a run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ...core import float64
from ..data.sizes import held_out_rows
from ..data.transforms import transforms_of
from ..engine import Backend, Engine, InProcess, gathered
from ..engine.compilation import ready_to_compile
from ..engine.threads import compute_threads
from ..models import HeldOut
from ..runs.frame import run_frame
from ..runs.growth import grown_frame
from ..runs.lock import hold_run_dir
from ..runs.resume import ResumeRules
from ..runs.state import LoopState, save_state
from .batch import EngineBatch, init_sample
from . import evidence
from .endings import collapse, end_at_best_if_collapsed, idling, refuse_non_finite_end
from .job import TrainJob, TrainResult
from .optimiser import step_of
from .progress import Progress, no_progress, told
from .sampling import MinibatchSchedule, key_data
from .step import StepState, released
from .stopping import StoppingRule


class Trainer:
    """One training job on one backend. The model, block sources, minibatch schedule and compiled
    step are built once; :meth:`run` trains a segment and may be called again (a later segment
    continues in memory; a retried Prefect task resumes from the newest checkpoint).

    Args:
        job: what to train.
        backend: where blocks are computed.
        initial_params: starting params instead of the model's ``init`` (estimators given starting
            values); None for the model's.
        frame: the frame to keep (``x_mean``, ``x_std``, ``targets``, ``model_binding``, ``model_settings``,
            as a :class:`~pep_gp.pipeline.runs.manifest.RunManifest` has them), instead of the data's
            own (:mod:`pep_gp.pipeline.runs.frame`): an estimator's ``partial_fit`` after its first; a run
            resumed on a grown store finds its own (:mod:`pep_gp.pipeline.runs.growth`).
        rows_represented: the rows the energy's data term stands for (an estimator's ``num_data``, or for
            ``partial_fit`` every row seen so far); None for the training split's.

    Raises:
        InputError: the model does not fit the data, its settings are invalid, or
            ``$PEP_COMPILATION_CACHE`` is not usable (:mod:`pep_gp.pipeline.engine.compilation`).
    """

    def __init__(self, job: TrainJob, backend: Backend, initial_params: Any = None, *, frame: Any = None,
                 rows_represented: int | None = None):
        ready_to_compile()
        self.job = job
        self.spec = spec = job.spec
        store, config = job.store, job.config
        self.n_rows = n_rows = store.n_rows("train")
        self.n_total = n_total = rows_represented or n_rows
        self.effective = config.for_rows(n_rows)
        block_rows = self.effective.block_rows
        kept = frame or grown_frame(job.run_dir, store)  # a run that trained on an earlier store keeps its frame
        self.frame = chosen = run_frame(spec, store, config, block_rows, kept)
        self.settings, self.binding, self.targets, self.notes = (chosen.settings, chosen.binding, chosen.targets,
                                                                 chosen.notes)
        self.transforms = transforms_of(store).to_json()  # copied into every checkpoint: runs predict alone
        self.model = spec.build(self.settings, self.binding)
        self.backend = backend
        self.step_fn: Any = None  # the step of the newest store version (_follow)
        self.data_size = spec.data_size(self.binding, n_total)
        blocks = partial(store.blocks, block_rows=block_rows, targets=self.targets, standardize=config.standardize,
                         statistics=chosen.statistics)
        self.train = Engine(backend, blocks("train"))
        predictive = spec.predictive(self.model, self.targets)
        self.held_out = None if predictive is None else HeldOut(predictive, self.targets)
        test_rows = store.n_rows("test")
        has_test = test_rows > 0 and self.held_out is not None
        test_blocks = held_out_rows(block_rows, test_rows)  # in blocks of their own size (pep_gp.pipeline.data.sizes)
        self.test = Engine(backend, blocks("test", block_rows=test_blocks)) if has_test else None
        self.schedule = MinibatchSchedule(self.train.source.n_blocks,
                                          math.ceil(self.effective.batch_size / block_rows), key_data(config.seed))
        self._follow([{"step": 0, "first_block": 0, "checksum": store.checksum, "epoch": 0}])
        self._initial_params = initial_params
        self._start: StepState | None = None
        self._state: LoopState | None = None

    @property
    def state(self) -> LoopState | None:
        """The loop's state after :meth:`run` (None before)."""
        return self._state

    def continue_from(self, params: Any, opt_state: Any, step: int, epochs: int) -> None:
        """Start :meth:`run` from ``params`` and ``opt_state`` at ``step`` (``epochs`` completed before), with a
        new schedule from there as a grown run's (:mod:`~pep_gp.pipeline.training.sampling`): what an
        estimator's ``partial_fit`` continues from."""
        self._follow([*self.data_log, {"step": step, "first_block": 0, "checksum": self.job.store.checksum,
                                       "epoch": epochs}])
        self._state = LoopState(params, opt_state, np.asarray(self.schedule.key_data, np.uint32), step=step)

    def _follow(self, log: list[dict[str, Any]]) -> None:
        """Take the run's ``data_log`` (:mod:`~pep_gp.pipeline.runs.growth`): the schedule, the planned
        steps, the stopping rule and the compiled step of its newest store version."""
        self.data_log, config, last = log, self.job.config, log[-1]
        self.schedule = dataclasses.replace(self.schedule, start_step=last["step"], first_block=last["first_block"])
        self.epoch_offset = last["epoch"]
        self.total_steps = last["step"] + config.total_steps(self.schedule.steps_per_epoch)
        self.stopping = StoppingRule.for_run(config.tol, self.n_total, self.schedule.steps_per_epoch)
        job = (self.spec, self.settings, self.model, config.trajectory().model_dump_json(),
               self.schedule.steps_per_epoch, self.total_steps if config.lr_schedule == "cosine" else 0)
        if self.step_fn is not None:  # a new step: what the last one holds is released
            self.step_fn.release()
        self.step_fn = step_of(config.parallel_over, self.backend, *job)

    # ---------------------------------------------------------------------------------------------
    def run(self, *, resume: bool = False, until_step: int | None = None, segment_steps: int | None = None,
            progress: Progress = no_progress) -> TrainResult:
        """Train up to ``until_step`` steps in total or to the end, checkpointing on the way.

        Args:
            resume: continue from the newest complete checkpoint of the run directory (start afresh
                if it has none); without it a run directory that holds checkpoints is refused. A later
                call on the same trainer without ``resume`` continues from where the last one stopped.
            until_step: stop after this many steps in total; None for all.
            segment_steps: stop at the next multiple of this many steps (a training segment).
            progress: receives progress events.

        Raises:
            InputError: the checkpoints are of another dataset or model, or of an incompatible config,
                or another process holds the run directory.
            TrainingFailed: ``max_rejected_in_a_row`` steps in a row were rejected, or the run ended
                with non-finite held-out metrics or energy (a checkpoint of the state is written first).
        """
        run_dir = self.job.run_dir
        holding = hold_run_dir(run_dir) if run_dir is not None else contextlib.nullcontext()
        with holding, compute_threads(), released(lambda: self.step_fn):
            if self._state is None or resume:
                self._state, path = self.restore_or_init(resume)
                notes = self.notes
            else:  # the next segment of this trainer's run: its notes were told when it started
                path, notes = None, ()
            state = self._state
            end = min(self.total_steps, self.total_steps if until_step is None else until_step,
                      (state.step // segment_steps + 1) * segment_steps if segment_steps else self.total_steps)
            stopped = told(progress, "start", step=state.step, total_steps=self.total_steps,
                           steps_per_epoch=self.schedule.steps_per_epoch, resumed_from=path, notes=notes,
                           model=self.job.model_name, model_settings=self.settings.model_dump(mode="json"),
                           config=self.job.config.model_dump(mode="json", exclude={"model"}))
            started = time.perf_counter() - state.seconds
            stops_early = self.job.config.stops_early
            while (state.step < end and stopped is None
                   and not (stops_early and self.stopping.converged(state.energies))):
                accepted = self.step(state)
                state.seconds = time.perf_counter() - started
                stopped = told(progress, "step", step=state.step, energy=state.last_energy, accepted=accepted)
                ended = (state.step == self.total_steps or stopped is not None
                         or (stops_early and self.stopping.converged(state.energies)))
                if ended:
                    end_at_best_if_collapsed(self.stopping, state)
                if self.schedule.ends_epoch(state.step - 1) or ended:
                    params = gathered(state.params)
                    asked = told(progress, "epoch", record=self.end_epoch(state), params=params)
                    if asked is not None and not ended:  # stopped at the epoch's record: the run ends here
                        stopped, ended = asked, True
                        end_at_best_if_collapsed(self.stopping, state)
                if state.rejected_in_a_row >= self.job.config.max_rejected_in_a_row:
                    self.save(state)
                    raise idling(state, self.total_steps, self.job.config.learning_rate)
                if state.step % self.job.config.checkpoint_every == 0 or state.step == end or ended:
                    path = self.save(state, final=ended) or path
                    progress("checkpoint", path=path)
            if path is None:  # nothing was left to train and nothing was saved: still leave one
                path = self.save(state, final=state.step >= self.total_steps or stopped is not None
                                 or (stops_early and self.stopping.converged(state.energies)))
            if state.step >= self.total_steps:
                refuse_non_finite_end(state)
            self._state = state = state.gathered()  # arrays again, before the step's state is released
        return TrainResult(state.params, state.step, self.total_steps, len(state.history), state.seconds, path,
                           state.history, state.rejected, state.rejected_sites,
                           self.stopping.converged(state.energies), self.stopping.gain_per_row(state.energies),
                           stops_early, self.notes, collapse(self.stopping, state), stopped)

    # ---------------------------------------------------------------------------------------------
    def fresh_state(self) -> LoopState:
        """The starting state (the initial params are computed once per trainer)."""
        if self._start is None:
            with float64():
                params = self._initial_params
                if params is None:
                    source = self.train.source
                    x, y = init_sample(source, self.job.config.seed)
                    params = self.spec.init(self.model, x, self.settings.in_model_units(source.x_mean, source.x_std),
                                            self.job.config.seed)
                    if hasattr(self.spec, "settle"):  # a start that depends on the targets too
                        params = self.spec.settle(self.model, params, x, y, self.settings, self.data_size)
                self._start = self.step_fn.init(params)
        return LoopState(self._start.params, self._start.opt_state, np.asarray(self.schedule.key_data, np.uint32))

    def restore_or_init(self, resume: bool) -> tuple[LoopState, Path | None]:
        """The state :meth:`run` starts from and the checkpoint it resumed (None: a fresh start), by the
        resume rules of :mod:`pep_gp.pipeline.runs.resume`; a resumed run follows its ``data_log``."""
        if self.job.run_dir is None:
            return self.fresh_state(), None
        rules = ResumeRules(self.job.run_dir, self.spec, self.settings, self.job.config, self.job.store,
                            self.schedule.steps_per_epoch, self.effective.block_rows, self.job.new_rows_only)
        start = rules.start(resume, self.fresh_state)
        if start.data_log is not None:
            self._follow(start.data_log)
        return start.state, start.path

    def save(self, loop: LoopState, final: bool = False) -> Path | None:
        """Write a checkpoint of ``loop`` (None, and nothing written, without a run directory); the one that
        ends the run (``final``) also records the log marginal likelihood of its parameters (one more pass
        over the training data, once a run), which :func:`pep_gp.load` reports as an estimator's ``fit`` does."""
        if self.job.run_dir is None:
            return None
        job, source, loop = self.job, self.train.source, loop.gathered()
        lml = self.log_marginal_likelihood(loop.params) if final else math.nan
        run = {**self.frame.manifest_fields(self.spec, job.store, job.config, source, self.transforms),
               "total_steps": self.total_steps, "steps_per_epoch": self.schedule.steps_per_epoch,
               "damping_per_epoch": True, "data_log": self.data_log,
               "converged": self.stopping.converged(loop.energies),  # the rule's verdict, for pep_gp.load
               "log_marginal_likelihood": lml if math.isfinite(lml) else None}
        return save_state(job.run_dir, loop, run, job.config.keep_checkpoints)

    # ---------------------------------------------------------------------------------------------
    def step(self, state: LoopState) -> bool:
        """One training step on ``state`` (in place); False if it was rejected as non-finite. The params the
        step starts from are kept if its energy estimate is the best so far (the energy of those params, or
        of them with the tied factor moved by the step's site update)."""
        start = state.params
        blocks = self.schedule.blocks(state.step)
        batch = EngineBatch(self.train, blocks, self.n_total / self.train.rows(blocks), self.data_size)
        step_state = StepState(state.params, state.opt_state, np.int32(state.step))
        new, info = self.step_fn.update(step_state, batch)
        energy, accepted, sites_accepted = jax.device_get(tuple(info))  # the step's one read from the device
        state.params, state.opt_state = new.params, new.opt_state
        state.rejected += int(not accepted)
        state.rejected_in_a_row = 0 if accepted else state.rejected_in_a_row + 1
        state.rejected_sites += int(not sites_accepted)
        state.last_energy = float(energy)
        state.energies = (state.energies + [state.last_energy])[-self.stopping.history:]
        if accepted:
            state.keep_best(start, state.last_energy, self.stopping.window_mean(state.energies))
        if math.isfinite(state.last_energy):
            total, count = state.epoch_energy
            state.epoch_energy = (total + state.last_energy, count + 1)
        state.step += 1
        return bool(accepted)

    def log_marginal_likelihood(self, params: Any) -> float:
        """The approximate log marginal likelihood of the training targets in their own units: the energy of
        all training rows (:func:`~pep_gp.pipeline.training.evidence.energy`) of the standardised targets less
        ``n log(scale)``, the Jacobian of standardising."""
        value = evidence.energy(self.model, self.step_fn.parts, self.train, params, self.data_size,
                                self.n_total / self.n_rows)
        return value - self.n_total * self.targets.log_scale()

    def evaluate(self, params: Any) -> dict[str, Any]:
        """Held-out metrics of ``params`` on the test split (empty without one)."""
        return evidence.held_out_metrics(self.test, self.held_out, params)

    def end_epoch(self, state: LoopState) -> dict[str, Any]:
        """The record of the epoch that ``state``'s last step ended (or cut short, when the run ends)."""
        total, count = state.epoch_energy
        energy = total / count if count else float("nan")
        record = {"epoch": self.epoch_offset + self.schedule.epoch_of(state.step - 1) + 1, "step": state.step,
                  "energy": energy, "energy_per_row": energy / self.n_total,
                  **self.evaluate(gathered(state.params)), "rejected_steps": state.rejected,
                  "rejected_site_updates": state.rejected_sites, "seconds": round(state.seconds, 3)}
        state.history.append(record)
        state.epoch_energy = (0.0, 0)
        return record


def train(job: TrainJob, backend: Backend | None = None, *, resume: bool = False,
          until_step: int | None = None, progress: Progress = no_progress) -> TrainResult:
    """Train ``job`` with ``backend`` (in-process when None); see :meth:`Trainer.run`."""
    return Trainer(job, backend or InProcess()).run(resume=resume, until_step=until_step, progress=progress)
