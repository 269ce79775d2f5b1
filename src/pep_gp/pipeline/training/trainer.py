"""The trainer: the one training loop of pep, around :mod:`pep_gp.pipeline.training.step`.

Each step ``s`` the minibatch schedule picks the blocks of ``s`` (:mod:`pep_gp.pipeline.training.sampling`) and the
step's ``update`` runs on them through the engine (Dask workers or this process); at the end of every
epoch the trainer records the epoch's mean energy and the held-out metrics, and every
``checkpoint_every`` steps and at the end it writes a checkpoint of its state
(:mod:`pep_gp.pipeline.runs.state`), so a resumed run continues bit-for-bit. While it runs it holds
the run directory's lock (:mod:`pep_gp.pipeline.runs.lock`): a second writer is refused. A run
fails loudly (:class:`~pep_gp.pipeline.errors.TrainingFailed`) rather than idle: after
``max_rejected_in_a_row`` steps in a row rejected as non-finite, or when it ends with non-finite
held-out metrics or energy. A run that ends collapsed, far below its best energy
(:meth:`~pep_gp.pipeline.training.stopping.StoppingRule.collapsed`), ends at its best parameters instead of
its last and reports :attr:`TrainResult.collapse` and ``converged`` false. The estimators run this same trainer over in-memory arrays
(:mod:`pep_gp.pipeline.data.datasets`), without a run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...core import float64
from ...core.models.multiclass import MultiClassGP
from ..data.blocks import TargetScaling
from ..data.transforms import transforms_of
from ..engine import Backend, Engine, InProcess
from ..engine.cache import Derived, derived
from ..engine.compilation import release_compiled_programs_if_crowded, use_compilation_cache
from ..engine.threads import compute_threads
from ..errors import InputError, TrainingFailed
from ..metrics import finish
from ..models import HeldOut, ModelSpec, chosen_settings, get_model, model_settings
from ..models.protocol import uses_site_updates
from ..runs import checkpoint
from ..runs.config import TrainConfig
from ..runs.growth import check_growable, data_log, earlier_versions, grown_entry, grown_frame
from ..runs.lock import hold_run_dir
from ..runs.manifest import RunManifest
from ..runs.run import check_parameterisation
from ..runs.state import LoopState, refuse_another_run, restored_state, save_state
from .callbacks import StopTraining
from .class_parallel import ClassParallelTraining
from .optimiser import class_parallel_step, compiled_step
from .sampling import MinibatchSchedule
from .step import Prepare, StepState, WithShared
from .stopping import StoppingRule

INIT_ROWS = 5_000  # training rows sampled to place the inducing inputs (k-means) and lengthscales

Progress = Callable[..., None]
"""``progress(event, **info)``; events: ``start`` (step, total_steps, steps_per_epoch, resumed_from, notes,
model, model_settings, config), ``step`` (step, energy, accepted), ``epoch`` (record, params), ``checkpoint``
(path); and ``end`` (summary), which the caller of :meth:`Trainer.run` sends once the run is over (the
estimators' ``fit``, ``pep train``). A progress callback that raises
:class:`~pep_gp.pipeline.training.callbacks.StopTraining` for a ``start``, ``step`` or ``epoch`` event ends the
run after that step (:attr:`TrainResult.stopped`); any other exception propagates."""


def no_progress(event: str, **info: Any) -> None:
    """A :data:`Progress` that shows nothing."""


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
    """The outcome of :func:`train` (up to its ``until_step``)."""

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


def capped_settings(settings: Any, n_rows: int) -> tuple[Any, tuple[str, ...]]:
    """``settings`` with the inducing points capped by the ``n_rows`` training rows they are placed on, and
    a note saying so (none when nothing changed).

    Capped, the inducing inputs are the training inputs and stay there (``train_inducing = False``): the
    sparse model is then the exact GP's (Bui, Yan & Turner 2017, §3), and moving them only lets the
    hyper-parameters overfit (Bauer, van der Wilk & Rasmussen 2016): ``SparseGPRegressor()`` on 10–80 rows
    put 34–80 % of held-out points in its 90 % intervals with them trained, 65–87 % with them fixed
    (scikit-learn's exact GP: 75–93 %; tests/pipeline/test_estimators.py). The settings' ``at_the_rows`` are
    imposed there too (the sparse GPs': ``alpha = 0``, :class:`~pep_gp.pipeline.models.sparse_gp.SparseGPSettings`)."""
    if settings.num_inducing <= n_rows or getattr(settings, "inducing_points", None) is not None:
        return settings, ()  # given inducing inputs are never capped: more than the rows are refused
    imposed = {name: value for name, value in settings.at_the_rows.items() if getattr(settings, name) != value}
    note = (f"num_inducing = {settings.num_inducing} capped at the {n_rows} training rows"
            + (", which are the inducing inputs, kept fixed" if settings.train_inducing else "")
            + "".join(f"; {name} = {value:g} there (was {getattr(settings, name):g})" for name, value in imposed.items()))
    return settings.model_copy(update={"num_inducing": n_rows, "train_inducing": False, **imposed}), (note,)


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
            own: an estimator's ``partial_fit`` after its first; a run resumed on a grown store finds its own
            (:mod:`pep_gp.pipeline.runs.growth`).
        rows_represented: the rows the energy's data term stands for (an estimator's ``num_data``, or for
            ``partial_fit`` every row seen so far); None for the training split's.

    Raises:
        InputError: the model does not fit the data, its settings are invalid, or
            ``$PEP_COMPILATION_CACHE`` is not usable (:mod:`pep_gp.pipeline.engine.compilation`).
    """

    def __init__(self, job: TrainJob, backend: Backend, initial_params: Any = None, *, frame: Any = None,
                 rows_represented: int | None = None):
        release_compiled_programs_if_crowded()
        use_compilation_cache()
        self.job = job
        self.spec = spec = job.spec
        store, config = job.store, job.config
        self.n_rows = n_rows = store.n_rows("train")
        self.n_total = n_total = rows_represented or n_rows
        self.effective = config.for_rows(n_rows)
        frame = frame or grown_frame(job.run_dir, store)  # a run that trained on an earlier version keeps its frame
        if frame is None:
            given = model_settings(spec, config.model, "config")
            spec.check(store, given, self.effective.block_rows)
            self.binding = spec.binding(store)
            chosen, decided = chosen_settings(spec, given, self.binding, n_rows)
            self.settings, capped = capped_settings(chosen, n_rows)
            self.notes = (*decided, *capped)
        else:
            check_growable(config)
            self.settings = model_settings(spec, frame.model_settings or config.model, "the run's checkpoint")
            spec.check(store, self.settings, self.effective.block_rows)
            self.notes = ()
            self.binding = frame.model_binding
        self.transforms = transforms_of(store).to_json()  # copied into every checkpoint: runs predict alone
        self.model = spec.build(self.settings, self.binding)
        if config.parallel_over == "classes" and not (isinstance(self.model, MultiClassGP)
                                                     and uses_site_updates(spec, self.settings)):
            raise InputError(f"parallel_over = classes spreads the classes of multi-class SEP (--model "
                             f"multiclass-sep) over the workers; --model {spec.name} is spread by rows: leave "
                             "parallel_over at rows")
        self.backend = backend
        self.classes: ClassParallelTraining | None = None  # the class-parallel step (parallel_over = classes)
        self.data_size = spec.data_size(self.binding, n_total)
        self.targets = (spec.targets(store, self.settings) if frame is None
                        else TargetScaling(frame.targets.shift, frame.targets.scale))
        statistics = None if frame is None else {"x_mean": frame.x_mean, "x_std": frame.x_std}
        block_rows = self.effective.block_rows
        blocks = partial(store.blocks, block_rows=block_rows, targets=self.targets, standardize=config.standardize,
                         statistics=statistics)
        self.train = Engine(backend, blocks("train"))
        predictive = spec.predictive(self.model, self.targets)
        self.held_out = None if predictive is None else HeldOut(predictive, self.targets)
        has_test = store.n_rows("test") > 0 and self.held_out is not None
        self.test = Engine(backend, blocks("test")) if has_test else None
        with float64():
            key_data = np.asarray(jax.random.key_data(jax.random.key(config.seed)))
        self.schedule = MinibatchSchedule(self.train.source.n_blocks,
                                          math.ceil(self.effective.batch_size / block_rows),
                                          tuple(int(k) for k in key_data))
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
        config, last = self.job.config, log[-1]
        self.data_log = log
        self.schedule = dataclasses.replace(self.schedule, start_step=last["step"], first_block=last["first_block"])
        self.epoch_offset = last["epoch"]
        self.total_steps = last["step"] + config.total_steps(self.schedule.steps_per_epoch)
        self.stopping = StoppingRule.for_run(config.tol, self.n_total, self.schedule.steps_per_epoch)
        job = (self.spec, self.settings, self.model, config.trajectory().model_dump_json(),
               self.schedule.steps_per_epoch, self.total_steps if config.lr_schedule == "cosine" else 0)
        self.step_fn = compiled_step(*job)
        if config.parallel_over == "classes":
            if self.classes is not None:
                self.classes.close()
            self.classes = ClassParallelTraining(class_parallel_step(*job), self.backend)

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
        with holding, compute_threads(), self._gathered_at_the_end():
            if self._state is None or resume:
                self._state, path = self.restore_or_init(resume)
                notes = self.notes
            else:  # the next segment of this trainer's run: its notes were told when it started
                path, notes = None, ()
            state = self._state
            end = min(self.total_steps, self.total_steps if until_step is None else until_step,
                      (state.step // segment_steps + 1) * segment_steps if segment_steps else self.total_steps)
            stopped = _told(progress, "start", step=state.step, total_steps=self.total_steps,
                            steps_per_epoch=self.schedule.steps_per_epoch, resumed_from=path, notes=notes,
                            model=self.job.model_name, model_settings=self.settings.model_dump(mode="json"),
                            config=self.job.config.model_dump(mode="json", exclude={"model"}))
            started = time.perf_counter() - state.seconds
            stops_early = self.job.config.stops_early
            while (state.step < end and stopped is None
                   and not (stops_early and self.stopping.converged(state.energies))):
                accepted = self.step(state)
                state.seconds = time.perf_counter() - started
                stopped = _told(progress, "step", step=state.step, energy=state.last_energy, accepted=accepted)
                ended = (state.step == self.total_steps or stopped is not None
                         or (stops_early and self.stopping.converged(state.energies)))
                if ended:
                    self._end_at_best_if_collapsed(state)
                if self.schedule.ends_epoch(state.step - 1) or ended:
                    asked = _told(progress, "epoch", record=self.end_epoch(state), params=self._arrays(state.params))
                    if asked is not None and not ended:  # stopped at the epoch's record: the run ends here
                        stopped, ended = asked, True
                        self._end_at_best_if_collapsed(state)
                if state.rejected_in_a_row >= self.job.config.max_rejected_in_a_row:
                    self.save(state)
                    raise TrainingFailed(self._idling(state))
                if state.step % self.job.config.checkpoint_every == 0 or state.step == end or ended:
                    path = self.save(state, final=ended) or path
                    progress("checkpoint", path=path)
            if path is None:  # nothing was left to train and nothing was saved: still leave one
                path = self.save(state, final=state.step >= self.total_steps or stopped is not None
                                 or (stops_early and self.stopping.converged(state.energies)))
            if state.step >= self.total_steps:
                self._refuse_non_finite_end(state)
        state = self._state  # with arrays again (_gathered_at_the_end)
        return TrainResult(state.params, state.step, self.total_steps, len(state.history), state.seconds, path,
                           state.history, state.rejected, state.rejected_sites,
                           self.stopping.converged(state.energies), self.stopping.gain_per_row(state.energies),
                           stops_early, self.notes, self._collapse(state), stopped)

    def _arrays(self, value: Any) -> Any:
        """``value`` (params, optimiser state) as arrays: gathered where the class-parallel step holds it."""
        return value if self.classes is None else self.classes.arrays(value)

    def _with_arrays(self, loop: LoopState) -> LoopState:
        """``loop`` with its params, optimiser state and best params as arrays (:meth:`_arrays`)."""
        if self.classes is None:
            return loop
        return dataclasses.replace(loop, params=self._arrays(loop.params), opt_state=self._arrays(loop.opt_state),
                                   best_params=self._arrays(loop.best_params))

    @contextlib.contextmanager
    def _gathered_at_the_end(self):
        """Around :meth:`run`: afterwards the loop's state holds arrays again (unless the run raised) and the
        class groups are released (a later segment places them again from those arrays)."""
        try:
            yield
            if self._state is not None:
                self._state = self._with_arrays(self._state)
        finally:
            if self.classes is not None:
                self.classes.close()

    def _collapse(self, state: LoopState) -> str | None:
        """How the run fell from its best (None unless it collapsed)."""
        if not self.stopping.collapsed(state.best_mean, state.energies):
            return None
        return (f"the energy fell from its best {state.best_energy:.6g} (step {state.best_step}) to a mean of "
                f"{self.stopping.window_mean(state.energies):.6g} over the last {self.stopping.window} steps "
                f"({self.stopping.fall_per_row(state.best_mean, state.energies):.2g} nats per row below the best "
                f"window); the fit ends at the parameters of step {state.best_step}")

    def _end_at_best_if_collapsed(self, state: LoopState) -> None:
        """Move a run that ends collapsed back to its best parameters (what the last epoch's record, the
        checkpoint and the result then hold)."""
        if self._collapse(state) is not None:
            state.params = state.best_params

    def _idling(self, state: LoopState) -> str:
        """The message of a run stopped by ``max_rejected_in_a_row``."""
        return (f"training stopped at step {state.step} of {self.total_steps}: the last {state.rejected_in_a_row} steps "
                f"were all rejected (non-finite energy or gradient; {state.rejected} rejected in all), so the "
                f"parameters stopped moving; the learning rate ({self.job.config.learning_rate:g}) is likely too large "
                "for this model and data: lower it in a new --run-dir (max_rejected_in_a_row sets how many in a row "
                "are allowed)")

    def _refuse_non_finite_end(self, state: LoopState) -> None:
        """TrainingFailed when the finished run's last epoch has non-finite held-out metrics or energy."""
        last = state.history[-1] if state.history else {}
        bad = {k: v for k, v in last.items() if k in ("energy", "test_error", "test_nll", "rmse")
               and not math.isfinite(v)}
        if bad:
            raise TrainingFailed(f"training ended at step {state.step} with non-finite {', '.join(bad)} "
                                 f"({state.rejected} of {state.step} steps rejected as non-finite): the model did "
                                 "not fit; lower the learning rate or check the data, in a new --run-dir")

    # ---------------------------------------------------------------------------------------------
    def fresh_state(self) -> LoopState:
        """The starting state (the initial params are computed once per trainer)."""
        if self._start is None:
            with float64():
                params = self._initial_params
                if params is None:
                    source = self.train.source
                    params = self.spec.init(self.model, self._init_sample(),
                                            self.settings.in_model_units(source.x_mean, source.x_std),
                                            self.job.config.seed)
                self._start = self.step_fn.init(params)
        return LoopState(self._start.params, self._start.opt_state, np.asarray(self.schedule.key_data, np.uint32))

    def _init_sample(self) -> np.ndarray:
        source = self.train.source
        count = min(source.n_blocks, math.ceil(INIT_ROWS / source.block_rows))
        chosen = np.sort(np.random.default_rng(self.job.config.seed).choice(source.n_blocks, count, replace=False))
        blocks = [source.read(int(b)) for b in chosen]
        return np.concatenate([b.x[b.mask] for b in blocks])

    def restore_or_init(self, resume: bool) -> tuple[LoopState, Path | None]:
        run_dir = self.job.run_dir
        if run_dir is None:
            return self.fresh_state(), None
        if not resume and checkpoint.has_checkpoints(run_dir):
            raise InputError(f"{run_dir}: already holds checkpoints; pass --resume to continue that run "
                             "or choose a new --run-dir")
        fresh = self.fresh_state()
        restored = checkpoint.restore(run_dir, lambda manifest: self._templates(manifest, fresh)) if resume else None
        if restored is None:
            return fresh, None
        state, manifest = restored_state(restored), RunManifest.of(restored.meta)
        log = data_log(manifest)
        if self.job.new_rows_only and manifest.dataset_checksum == self.job.store.checksum and len(log) == 1:
            raise InputError(f"--new-rows-only: {self.job.store.path} has not grown since {restored.path} (append rows "
                             "with `pep ingest … --append` first)")
        if manifest.dataset_checksum != self.job.store.checksum:  # the store grew since this checkpoint
            log.append(grown_entry(log, restored.step, self.job.store, manifest.dataset_checksum,
                                   self.effective.block_rows, self.job.new_rows_only, state.history))
            state.energies, state.epoch_energy = [], (0.0, 0)
            state.best_params, state.best_energy, state.best_step, state.best_mean = None, float("-inf"), -1, float("-inf")
        self._follow(log)
        return state, restored.path

    def _templates(self, manifest: dict[str, Any], fresh: LoopState) -> dict[str, Any]:
        """The pytrees to restore, after refusing another run's checkpoint (InputError; ValueError for an
        invalid manifest, a damaged checkpoint)."""
        store = self.job.store
        manifest = RunManifest.of(manifest)
        check_parameterisation(manifest, self.spec)
        self._refuse_per_step_damping(manifest)
        refuse_another_run(manifest, self.job.run_dir, self.job.model_name, store.checksum, store.path,
                           self.job.config, earlier_versions(store))
        self._refuse_other_settings(manifest)
        best = {"best_params": fresh.params} if manifest.best_step >= 0 else {}
        return {"params": fresh.params, "opt_state": fresh.opt_state, "key": fresh.key_data, **best}

    def _refuse_other_settings(self, manifest: RunManifest) -> None:
        """InputError when the run trained with other model settings than the same config gives here: a default
        that changed, or a setting left to the data (``likelihood = "auto"``) decided otherwise, by the pep that
        wrote it. Resumed, its parameters would go on training as another model."""
        if manifest.model_settings is None:
            return
        ours = self.settings.model_dump(mode="json")
        changed = [f"{name}: {value!r} → {ours[name]!r}" for name, value in sorted(manifest.model_settings.items())
                   if name in ours and ours[name] != value]
        if changed:
            raise InputError(f"{self.job.run_dir}: this run trained with other model settings than its config gives "
                             f"here ({'; '.join(changed)}); set them in the config's [model] table to resume it, or "
                             "use a new --run-dir")

    def _refuse_per_step_damping(self, manifest: RunManifest) -> None:
        """InputError for a minibatch run with decaying site steps written when ``damping_decay`` was per step
        (before ``damping_per_epoch``): resumed here its damping would jump to the per-epoch schedule's."""
        settings, per_epoch = self.settings, self.schedule.steps_per_epoch
        if (manifest.damping_per_epoch or per_epoch == 1 or not uses_site_updates(self.spec, settings)
                or settings.damping_decay == 1.0):
            return
        raise InputError(f"{self.job.run_dir}: this run's site step decayed by damping_decay = "
                         f"{settings.damping_decay:g} per step (a pep before the decay per epoch); this pep decays it "
                         f"per epoch ({per_epoch} steps), so it cannot resume the run: retrain in a new --run-dir")

    def save(self, loop: LoopState, final: bool = False) -> Path | None:
        """Write a checkpoint of ``loop`` (None, and nothing written, without a run directory).

        The checkpoint that ends the run (``final``) also records the log marginal likelihood of its
        parameters (:meth:`log_marginal_likelihood`: one more pass over the training data, once a run),
        which :func:`pep_gp.load` reports as an estimator's ``fit`` does.
        """
        if self.job.run_dir is None:
            return None
        config, source = self.job.config, self.train.source
        run_meta = {"model": self.job.model_name, "model_binding": self.binding, "data": self.job.store.path,
                    "model_settings": self.settings.model_dump(mode="json"),
                    "parameterisation": self.spec.parameterisation,
                    "dataset_checksum": self.job.store.checksum, "config": config.model_dump(),
                    "x_mean": source.x_mean, "x_std": source.x_std,
                    "targets": {"shift": self.targets.shift, "scale": self.targets.scale},
                    "transforms": self.transforms,
                    "total_steps": self.total_steps, "steps_per_epoch": self.schedule.steps_per_epoch,
                    "damping_per_epoch": True,
                    "converged": self.stopping.converged(loop.energies),  # the rule's verdict, for pep_gp.load
                    "data_log": self.data_log}
        loop = self._with_arrays(loop)
        if final:
            evidence = self.log_marginal_likelihood(loop.params)
            run_meta["log_marginal_likelihood"] = evidence if math.isfinite(evidence) else None
        return save_state(self.job.run_dir, loop, run_meta, config.keep_checkpoints)

    # ---------------------------------------------------------------------------------------------
    def step(self, state: LoopState) -> bool:
        """One training step on ``state`` (in place); False if it was rejected as non-finite. The params the
        step starts from are kept if its energy estimate is the best so far (the energy of those params, or
        of them with the tied factor moved by the step's site update)."""
        start = state.params
        blocks = self.schedule.blocks(state.step)
        batch = EngineBatch(self.train, blocks, self.n_total / self.train.rows(blocks), self.data_size)
        step_state = StepState(state.params, state.opt_state, np.int32(state.step))
        new, info = (self.step_fn if self.classes is None else self.classes).update(step_state, batch)
        energy, accepted, sites_accepted = jax.device_get(tuple(info))  # the step's one read from the device
        state.params, state.opt_state = new.params, new.opt_state
        state.rejected += int(not accepted)
        state.rejected_in_a_row = 0 if accepted else state.rejected_in_a_row + 1
        state.rejected_sites += int(not sites_accepted)
        state.last_energy = float(energy)
        state.energies = (state.energies + [state.last_energy])[-self.stopping.history:]
        if (accepted and state.keep_best(start, state.last_energy, self.stopping.window_mean(state.energies))
                and self.classes is not None):
            state.best_params = self.classes.pinned(start)
        if math.isfinite(state.last_energy):
            total, count = state.epoch_energy
            state.epoch_energy = (total + state.last_energy, count + 1)
        state.step += 1
        return bool(accepted)

    def energy(self, params: Any) -> float:
        """The energy ``F = G + Σ_blocks L`` of all training rows at ``params`` (one pass over the blocks; the
        data term scaled to the rows represented when those are more, as a minibatch's is). It runs the step's
        compiled programs where it can (the step-shared quantities; the data term of a model without site
        updates), so that a fit's evidence compiles the global term only (and, with site updates, the data
        term's value): each program is seconds of compiling on a CPU, again for every number of features."""
        with float64():
            size = jnp.asarray(self.data_size, jnp.float64)
            prepare, blocks = Prepare(self.model), range(self.train.source.n_blocks)
            shared, _ = derived(prepare, (params, size))  # the step's own compiled program
            if self.step_fn.parts.site_term is None:  # the step's data term too (its gradient unused): no compiling
                data, _ = self.train.map_sum(Derived(self.step_fn.parts.data_term, WithShared(prepare)), (params, size),
                                             blocks)
            else:  # the step's data term reads the site-updated quantities
                data = self.train.map_sum(DataValue(self.model), (params, shared), blocks)
            return float(_global_energy(self.model, params, shared, size) + data * (self.n_total / self.n_rows))

    def log_marginal_likelihood(self, params: Any) -> float:
        """The approximate log marginal likelihood of the training targets in their own units: the
        :meth:`energy` of the standardised targets less ``n log(scale)``, the Jacobian of standardising."""
        return self.energy(params) - self.n_total * math.log(self.targets.scale)

    def evaluate(self, params: Any) -> dict[str, Any]:
        """Held-out metrics of ``params`` on the test split (empty without one)."""
        if self.test is None:
            return {}
        return finish(self.test.map_sum(self.held_out, params, range(self.test.source.n_blocks)))

    def end_epoch(self, state: LoopState) -> dict[str, Any]:
        """The record of the epoch that ``state``'s last step ended (or cut short, when the run ends)."""
        total, count = state.epoch_energy
        energy = total / count if count else float("nan")
        record = {"epoch": self.epoch_offset + self.schedule.epoch_of(state.step - 1) + 1, "step": state.step,
                  "energy": energy, "energy_per_row": energy / self.n_total,
                  **self.evaluate(self._arrays(state.params)), "rejected_steps": state.rejected,
                  "rejected_site_updates": state.rejected_sites, "seconds": round(state.seconds, 3)}
        state.history.append(record)
        state.epoch_energy = (0.0, 0)
        return record


def _told(progress: Progress, event: str, **info: Any) -> str | None:
    """Send ``event`` to ``progress``: None, or why it asked the run to stop (:class:`StopTraining`)."""
    try:
        progress(event, **info)
    except StopTraining as stop:
        return str(stop) or f"a callback stopped the run at its {event} event"
    return None


@dataclass(frozen=True)
class DataValue:
    """The data term ``L`` of one block (no gradient); input ``(params, shared)``."""

    model: Any

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return self.model.data_energy(params, shared, x, y, mask)


@partial(jax.jit, static_argnums=0)
def _global_energy(model, params, shared, size):
    return model.global_energy(params, shared, size)


@dataclass(frozen=True)
class EngineBatch:
    """A minibatch of blocks as the step sees it (:class:`pep_gp.pipeline.training.step.Minibatch`)."""

    engine: Engine
    blocks: list[int]
    scale: float
    data_size: Any  # the model's spec's data_size: N, or the rows of each class

    def sum(self, fn: Callable, inputs: Any) -> Any:
        return self.engine.map_sum(fn, inputs, self.blocks)

    def sum_keeping(self, fn: Callable, inputs: Any) -> Any:
        return self.engine.map_sum_keeping(fn, inputs, self.blocks)

    def sum_kept(self, fn: Callable, inputs: Any) -> Any:
        return self.engine.map_sum_kept(fn, inputs)


def train(job: TrainJob, backend: Backend | None = None, *, resume: bool = False,
          until_step: int | None = None, progress: Progress = no_progress) -> TrainResult:
    """Train ``job`` with ``backend`` (in-process when None); see :meth:`Trainer.run`."""
    return Trainer(job, backend or InProcess()).run(resume=resume, until_step=until_step, progress=progress)
