"""The coordinator: the training loop around the engine (DESIGN §2, §4, §5).

Each step ``s``:

1. the minibatch schedule picks the blocks of ``s`` (:mod:`pipeline.sampling`);
2. the coordinator computes the step-shared quantities ``S`` once, with their pullback
   (:mod:`pipeline.models`);
3. for models with EP-style site statistics (seed001's SEP), the engine first returns their sums over
   the minibatch and the coordinator applies the damped tied-factor update (the model's
   ``site_update`` rejects a non-finite result by itself) and refreshes the parts of ``S`` that depend
   on the factor — the paper's order (seed001 §2.3, spec §2.9: refine the factors, rebuild ``q``, then
   take the gradient with the new factor);
4. the engine returns ``Σ_blocks`` of the data term and its gradients w.r.t. the params and ``S``,
   summed in a fixed order (:mod:`pipeline.engine`); the coordinator forms the minibatch estimate
   ``F̂ = G + (N/|B|) Σ_B L`` and its gradient (chain rule through ``S``) and takes a guarded optax
   Adam ascent step (:func:`pipeline.optimize.ascent_update`: a step with a non-finite energy or
   gradient leaves params and optimiser state unchanged and is counted as rejected);
5. at the end of every epoch it evaluates the held-out metrics and records the epoch's mean energy;
   every ``checkpoint_every`` steps and at the end it writes a checkpoint (:mod:`pipeline.checkpoint`).

The state that a checkpoint holds — params, optimiser state, step (which fixes the sampling position),
the RNG key, the epoch's running energy and the history — is everything the loop reads, so a resumed
run continues bit-for-bit as an uninterrupted one would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import pepcore
from pipeline import checkpoint
from pipeline.blocks import BlockSource, TargetScaling
from pipeline.config import TrainConfig
from pipeline.engine import Backend, Engine, InProcess, compute_threads
from pipeline.errors import InputError
from pipeline.metrics import finish
from pipeline.models import DataTerm, ModelSpec, SiteTerm, get_model, has_sites, shared_form
from pipeline.optimize import adam, ascent_update
from pipeline.sampling import MinibatchSchedule
from pipeline.stores import Store, open_store

INIT_ROWS = 5_000  # training rows sampled to place the inducing inputs (k-means) and lengthscales

Progress = Callable[..., None]
"""``progress(event, **info)``; events: ``start`` (step, total_steps, steps_per_epoch), ``step``
(step, energy, accepted), ``epoch`` (record), ``checkpoint`` (path)."""


def no_progress(event: str, **info: Any) -> None:
    """A :data:`Progress` that shows nothing."""


@dataclass(frozen=True)
class TrainJob:
    """What to train: a registered model on a store, with a config, into a run directory."""

    model: str
    store: Store
    config: TrainConfig
    run_dir: Path


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

    @property
    def finished(self) -> bool:
        return self.steps >= self.total_steps

    @property
    def metrics(self) -> dict[str, Any]:
        """The held-out metrics of the last completed epoch."""
        last = self.history[-1] if self.history else {}
        return {k: v for k, v in last.items() if k in ("test_error", "test_nll", "rmse", "n_test")}


@dataclass
class _LoopState:
    params: Any
    opt_state: Any
    key_data: np.ndarray
    step: int = 0
    rejected: int = 0
    epoch_energy: tuple[float, int] = (0.0, 0)  # sum and count of the finite step energies so far
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    last_energy: float = float("nan")


def learning_rate(config: TrainConfig, steps_per_epoch: int, total_steps: int) -> optax.Schedule:
    """The configured schedule: constant, cosine decay over all steps, or exponential per epoch."""
    if config.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(config.learning_rate, total_steps, alpha=config.lr_final_fraction)
    if config.lr_schedule == "exponential":
        return optax.exponential_decay(config.learning_rate, steps_per_epoch, config.lr_decay, staircase=True)
    return optax.constant_schedule(config.learning_rate)


class Trainer:
    """One training job on one backend. The model, block sources, minibatch schedule, optimiser and
    compiled update are built once; :meth:`run` trains a segment and may be called again (e.g. by a
    retried Prefect task), always continuing from the newest checkpoint.

    Raises:
        InputError: the model does not fit the store.
    """

    def __init__(self, job: TrainJob, backend: Backend):
        self.job = job
        spec = get_model(job.model)
        spec.check(job.store)
        self.binding = spec.store_binding(job.store)
        self.spec = spec.bind(self.binding)
        store, config = job.store, job.config
        self.effective = config.for_rows(store.n_rows("train"))
        self.targets = self.spec.targets(store)
        self.model = self.spec.model(config)
        block_rows = self.effective.block_rows
        self.train = Engine(backend, BlockSource.of(store, "train", block_rows, self.targets, config.standardize))
        self.test = Engine(backend, BlockSource.of(store, "test", block_rows, self.targets, config.standardize))
        self.n_total = store.n_rows("train")
        energy = shared_form(self.model)
        self.data_term = DataTerm(energy, self.n_total)
        self.site_term = SiteTerm(energy, self.n_total) if has_sites(self.model) else None
        self.held_out = self.spec.held_out(self.model, self.targets)
        with pepcore.float64():
            key_data = np.asarray(jax.random.key_data(jax.random.key(config.seed)))
        self.schedule = MinibatchSchedule(self.train.source.n_blocks,
                                          math.ceil(self.effective.batch_size / block_rows),
                                          tuple(int(k) for k in key_data))
        self.total_steps = config.epochs * self.schedule.steps_per_epoch
        self.compiled = _compiled_updates(self.spec, config.trajectory(), self.n_total,
                                          self.schedule.steps_per_epoch,
                                          self.total_steps if config.lr_schedule == "cosine" else 0)
        self.optimizer = self.compiled.optimizer
        self._start: tuple[Any, Any] | None = None

    # ---------------------------------------------------------------------------------------------
    def run(self, *, resume: bool = False, until_step: int | None = None, segment_steps: int | None = None,
            progress: Progress = no_progress) -> TrainResult:
        """Train (resuming from the newest checkpoint when ``resume``) up to ``until_step`` steps in
        total or to the end, checkpointing on the way.

        Args:
            resume: continue from the newest complete checkpoint of the run directory (start afresh
                if it has none); without it a run directory that holds checkpoints is refused.
            until_step: stop after this many steps in total; None for all.
            segment_steps: stop at the next multiple of this many steps (a training segment).
            progress: receives progress events.

        Raises:
            InputError: the checkpoints are of another dataset or model, or of an incompatible config.
        """
        with compute_threads():
            state, path = self.restore_or_init(resume)
            end = min(self.total_steps, until_step or self.total_steps,
                      (state.step // segment_steps + 1) * segment_steps if segment_steps else self.total_steps)
            progress("start", step=state.step, total_steps=self.total_steps,
                     steps_per_epoch=self.schedule.steps_per_epoch, resumed_from=path)
            started = time.perf_counter() - state.seconds
            while state.step < end:
                accepted = self.step(state)
                state.seconds = time.perf_counter() - started
                progress("step", step=state.step, energy=state.last_energy, accepted=accepted)
                if self.schedule.ends_epoch(state.step - 1):
                    progress("epoch", record=self.end_epoch(state))
                if state.step % self.job.config.checkpoint_every == 0 or state.step == end:
                    path = self.save(state)
                    progress("checkpoint", path=path)
            if path is None:  # nothing was left to train and nothing was saved: still leave one
                path = self.save(state)
        return TrainResult(state.params, state.step, self.total_steps, len(state.history),
                           state.seconds, path, state.history, state.rejected)

    # ---------------------------------------------------------------------------------------------
    def fresh_state(self) -> _LoopState:
        """The starting state (the initial params are computed once per trainer)."""
        if self._start is None:
            with pepcore.float64():
                params = self.spec.init(self.model, self._init_sample(), self.job.config)
                self._start = (params, self.optimizer.init(params))
        params, opt_state = self._start
        return _LoopState(params, opt_state, np.asarray(self.schedule.key_data, np.uint32))

    def _init_sample(self) -> np.ndarray:
        source = self.train.source
        count = min(source.n_blocks, math.ceil(INIT_ROWS / source.block_rows))
        chosen = np.sort(np.random.default_rng(self.job.config.seed).choice(source.n_blocks, count, replace=False))
        blocks = [source.read(int(b)) for b in chosen]
        return np.concatenate([b.x[b.mask] for b in blocks])

    def templates(self, manifest: dict[str, Any], fresh: _LoopState) -> dict[str, Any]:
        """The pytrees to restore from ``manifest``, after refusing another dataset or model or an
        incompatible config (InputError)."""
        run_dir, store = self.job.run_dir, self.job.store
        if manifest["dataset_checksum"] != store.checksum:
            raise InputError(f"{run_dir}: this run was trained on {manifest['data']} (checksum "
                             f"{manifest['dataset_checksum']}), not on {store.path} (checksum "
                             f"{store.checksum}); resume with the same data or use a new --run-dir")
        if manifest["model"] != self.job.model:
            raise InputError(f"{run_dir}: this run trains --model {manifest['model']}, not {self.job.model}")
        changed = TrainConfig(**manifest["config"]).incompatibilities(self.job.config)
        if changed:
            raise InputError(f"{run_dir}: cannot resume with a different config ({'; '.join(changed)}); "
                             "use the run's config or a new --run-dir")
        return {"params": fresh.params, "opt_state": fresh.opt_state, "key": fresh.key_data}

    def restore_or_init(self, resume: bool) -> tuple[_LoopState, Path | None]:
        run_dir = self.job.run_dir
        if not resume and checkpoint.has_checkpoints(run_dir):
            raise InputError(f"{run_dir}: already holds checkpoints; pass --resume to continue that run "
                             "or choose a new --run-dir")
        fresh = self.fresh_state()
        restored = checkpoint.restore(run_dir, lambda m: self.templates(m, fresh)) if resume else None
        if restored is None:
            return fresh, None
        meta = restored.meta
        trees = restored.trees
        state = _LoopState(trees["params"], trees["opt_state"], trees["key"], restored.step,
                           meta["rejected_steps"], tuple(meta["epoch_energy"]), meta["history"],
                           meta["seconds"])
        return state, restored.path

    def save(self, state: _LoopState) -> Path:
        config = self.job.config
        source = self.train.source
        meta = {"model": self.job.model, "model_binding": self.binding, "data": self.job.store.path,
                "dataset_checksum": self.job.store.checksum, "config": config.model_dump(),
                "x_mean": source.x_mean, "x_std": source.x_std,
                "targets": {"shift": self.targets.shift, "scale": self.targets.scale},
                "total_steps": self.total_steps, "steps_per_epoch": self.schedule.steps_per_epoch,
                "rejected_steps": state.rejected, "epoch_energy": state.epoch_energy,
                "history": state.history, "seconds": state.seconds,
                "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        trees = {"params": state.params, "opt_state": state.opt_state, "key": state.key_data}
        return checkpoint.save(self.job.run_dir, state.step, trees, meta, config.keep_checkpoints)

    # ---------------------------------------------------------------------------------------------
    def step(self, state: _LoopState) -> bool:
        """One training step on ``state`` (in place); False if it was rejected as non-finite."""
        blocks = self.schedule.blocks(state.step)
        scale = self.n_total / self.train.rows(blocks)
        params, compiled = state.params, self.compiled
        with pepcore.float64():
            shared, pullback = compiled.prepare(params)
        if self.site_term is not None:
            stats = self.train.map_sum(self.site_term, (params, shared), blocks)
            with pepcore.float64():
                params, shared = compiled.site_update(params, shared, stats, scale)
        value, grad = self.train.map_sum(self.data_term, (params, shared), blocks)
        with pepcore.float64():
            params, opt_state, ok, energy = compiled.update(params, state.opt_state, shared, pullback, value,
                                                            grad, scale)
        state.params, state.opt_state = params, opt_state
        state.rejected += int(not ok)
        state.last_energy = float(energy)
        if math.isfinite(state.last_energy):
            total, count = state.epoch_energy
            state.epoch_energy = (total + state.last_energy, count + 1)
        state.step += 1
        return bool(ok)

    def evaluate(self, params: Any) -> dict[str, Any]:
        """Held-out metrics of ``params`` on the test split."""
        return finish(self.test.map_sum(self.held_out, params, range(self.test.source.n_blocks)))

    def end_epoch(self, state: _LoopState) -> dict[str, Any]:
        total, count = state.epoch_energy
        energy = total / count if count else float("nan")
        record = {"epoch": self.schedule.epoch_of(state.step - 1) + 1, "step": state.step,
                  "energy": energy, "energy_per_row": energy / self.n_total,
                  **self.evaluate(state.params), "rejected_steps": state.rejected,
                  "seconds": round(state.seconds, 3)}
        state.history.append(record)
        state.epoch_energy = (0.0, 0)
        return record


def minibatch_energy(model: Any, n_total: int, params: Any, shared: Any, pullback: Callable, data_value: Any,
                     data_grad: Any, scale: float) -> tuple[Any, Any]:
    """``F̂ = G(θ, S) + scale·Σ_B L`` and its gradient from the summed block results (value, and the
    gradients w.r.t. ``θ`` and ``S``): ``∂G/∂θ + scale·Σ∂L/∂θ + pullback(∂G/∂S + scale·Σ∂L/∂S)``, the
    chain rule through ``S = step_shared(θ)`` (``model`` in the step-shared form, :mod:`pipeline.models`)."""
    global_value, (global_grad, global_shared_grad) = jax.value_and_grad(
        model.global_energy_shared, argnums=(0, 1))(params, shared, n_total)

    def plus_scaled(total, part):
        return jax.tree_util.tree_map(lambda a, b: a + scale * b, total, part)

    data_grad_params, data_grad_shared = data_grad
    (through_shared,) = pullback(plus_scaled(global_shared_grad, data_grad_shared))
    grad = jax.tree_util.tree_map(jnp.add, plus_scaled(global_grad, data_grad_params), through_shared)
    return global_value + scale * data_value, grad


@dataclass(frozen=True)
class _CompiledUpdates:
    """The coordinator's compiled pieces of a step (see the module docstring)."""

    optimizer: optax.GradientTransformation
    prepare: Callable  # params -> (S, pullback of S)
    site_update: Callable  # (params, S, stats, scale) -> (params, S refreshed)
    update: Callable  # (params, opt_state, S, pullback, data value, data grads, scale) -> params, ...


@lru_cache(maxsize=8)
def _compiled_updates(spec: ModelSpec, config: TrainConfig, n_total: int, steps_per_epoch: int,
                      total_steps: int) -> _CompiledUpdates:
    """The optimiser and the compiled coordinator updates: the step-shared quantities (with their
    pullback), the damped tied-factor update for models with site statistics, and the Adam update
    (``G`` and its gradient, the scaled data terms, the chain rule through ``S``, the guarded ascent
    step). Cached on hashable arguments, so that trainers of equal jobs (segments, retries) compile
    once."""
    model = shared_form(spec.model(config))
    optimizer = adam(learning_rate(config, steps_per_epoch, total_steps), spec.frozen(config))

    def shared(params):
        return model.step_shared(params, n_total)

    def update(params, opt_state, shared_values, pullback, data_value, data_grad, scale):
        value, grad = minibatch_energy(model, n_total, params, shared_values, pullback, data_value, data_grad,
                                       scale)
        params, opt_state, ok = ascent_update(optimizer, params, opt_state, value, grad)
        return params, opt_state, ok, value

    def site_update(params, shared_values, stats, scale):
        params = model.site_update(params, stats, scale, config.damping)
        return params, model.refresh_shared(params, shared_values, n_total)

    return _CompiledUpdates(optimizer, jax.jit(lambda params: jax.vjp(shared, params)), jax.jit(site_update),
                            jax.jit(update))


def train(job: TrainJob, backend: Backend | None = None, *, resume: bool = False,
          until_step: int | None = None, progress: Progress = no_progress) -> TrainResult:
    """Train ``job`` with ``backend`` (in-process when None); see :meth:`Trainer.run`."""
    return Trainer(job, backend or InProcess()).run(resume=resume, until_step=until_step, progress=progress)


def bound_spec(manifest: dict[str, Any]) -> ModelSpec:
    """The model spec of a checkpoint, bound to its training store's attributes as when it trained."""
    return get_model(manifest["model"]).bind(manifest.get("model_binding", {}))


def load_run(run_dir: Path) -> checkpoint.Restored:
    """The newest intact checkpoint of a run, with its params (InputError if it has none)."""

    def templates(manifest: dict[str, Any]) -> dict[str, Any]:
        spec = bound_spec(manifest)
        config = TrainConfig(**manifest["config"])
        n_features = len(manifest["x_mean"])
        with pepcore.float64():  # any params of the right shapes: M inducing inputs in D dimensions
            return {"params": spec.init(spec.model(config), np.zeros((config.num_inducing, n_features)), config)}

    restored = checkpoint.restore(run_dir, templates)
    if restored is None:
        raise InputError(f"{run_dir}: no complete checkpoint (train first with `pep train`)")
    return restored


def evaluate(run_dir: Path, data: str | Path | None = None, backend: Backend | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` on the test split of ``data`` (by
    default the store it was trained on), standardised with the training statistics of the run."""
    restored = load_run(run_dir)
    manifest = restored.meta
    store = open_store(data if data is not None else manifest["data"])
    get_model(manifest["model"]).check(store)
    spec = bound_spec(manifest)
    if len(store.feature_names) != len(manifest["x_mean"]):
        raise InputError(f"{store.path}: has {len(store.feature_names)} features; the model of "
                         f"{run_dir} was trained on {len(manifest['x_mean'])}")
    config = TrainConfig(**manifest["config"])
    targets = TargetScaling(**manifest["targets"])
    source = BlockSource(store.path, "test", store.n_rows("test"), config.block_rows,
                         tuple(manifest["x_mean"]), tuple(manifest["x_std"]), targets)
    engine = Engine(backend or InProcess(), source)
    sums = engine.map_sum(spec.held_out(spec.model(config), targets), restored.trees["params"],
                          range(source.n_blocks))
    return {**finish(sums), "step": restored.step, "checkpoint": str(restored.path)}
