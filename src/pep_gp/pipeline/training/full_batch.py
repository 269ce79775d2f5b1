"""Full-batch fits: the trainer's energy over every training row at once, maximised by L-BFGS, beside the
minibatch Adam loop of :mod:`pep_gp.pipeline.training.trainer` (as GPJax's ``fit_scipy`` sits beside its
``fit``).

Where the rows fit in memory the energy ``F(θ) = G(θ, S) + (N/n)·Σ_blocks L(θ, S; block)`` is full batch
and smooth, and a quasi-Newton method reaches its optimum in tens of iterations where Adam takes hundreds.
The value and gradient are those of the trainer's step on a batch of every block
(:func:`~pep_gp.pipeline.training.step.minibatch_energy` of the engine's block sums, in the blocks' fixed
order), so a fit on a Dask cluster takes the same bits as one in this process; scipy's L-BFGS-B (Byrd, Lu,
Nocedal & Zhu 1995; Nocedal & Wright 2006, §7.2) minimises ``−F`` over the trainable leaves (those
``spec.frozen`` leaves free), which are the unconstrained parameters the step's Adam moves.

A model whose tied factor moves by site updates (``uses_site_updates``) follows EP's classic recipe
(Rasmussen & Williams 2006, §3.6 and §5.5.2; Bui, Yan & Turner 2017, §3): damped full-batch site updates
(the step's own, every row's statistics at once) to their fixed point, then L-BFGS on the hyper-parameters,
each of whose evaluations first moves the factor by one sweep from where the last left it (as the
minibatch step updates the sites before its gradient), in rounds until one changes the energy by less than
the tolerance. Exact sites (the Gaussian regressor's) reach their fixed point in one undamped sweep from any
factor, and there the energy is the collapsed PEP-α bound and its gradient with the factor held the bound's
(:class:`~pep_gp.core.models.power_ep.PowerEPSparseGP`). They are swept undamped whatever the settings'
``damping``, which paces minibatch steps (damped, the factor lagged the hyper-parameters and L-BFGS ended 6 nats
below the bound's optimum on a 60-row sine at 0.9). Where every training row is in one block
(``SparseGPRegressor`` puts them there for a full-batch fit), L-BFGS maximises the bound itself (the model's
``collapsed``: no factor, one program over the rows per evaluation where the rounds run a sweep's three and the
energy's two; boston's default fit 0.8 s warm against 1.8 s), and one sweep at the end, one program of its own
(:class:`SettledFactor`), puts the factor at the fitted hyper-parameters' fixed point (boston's default fit in a
fresh process, compilation included, measured once: 2.9 s against 3.9–4.4 s); they are
``CollapsedGPRegressor``'s at the same settings, bit for bit. The fit reports the bound as its energy, which the
model's own energy at that fixed point equals to rounding without jitter (2·10⁻¹⁰ relative) and to the jitter's
effect with it (2·10⁻⁵ relative at the default on a 60-row sine, tests/pipeline/test_full_batch.py).

Stopping: an L-BFGS run stops when :data:`QUIET_ITERATIONS` iterations in a row each raise the energy by less
than ``tol`` nats per training row: the minibatch stopping rule's tolerance
(:mod:`~pep_gp.pipeline.training.stopping`), per iteration instead of per window of
:data:`~pep_gp.pipeline.training.stopping.MIN_WINDOW` noisy steps, since the energy is exact here (a 25th of it
kept the sparse GP classifier creeping up a ridge of its energy for hundreds of iterations on breast_cancer,
to a higher energy and a worse test NLL); or when the largest entry of the gradient is below
:data:`GRADIENT_TOL`, or when its line search can go no further (the energy is then at its optimum to
rounding); and after ``max_iter`` iterations in all (site sweeps count as iterations). A start whose energy or
gradient is not finite fails the fit (:class:`~pep_gp.pipeline.errors.TrainingFailed`): L-BFGS-B would call it
converged; so does an end whose energy lies above what any log marginal likelihood of the rows can be
(:func:`~pep_gp.pipeline.training.endings.refuse_impossible_energy`). A model with site updates ends when a round
(sweeps, then L-BFGS) changes the energy by less than ``tol`` nats per row.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from ...core import float64
from ...core.parameters import on_device
from ..engine.cache import Derived, derived
from ..engine.threads import compute_threads
from ..errors import TrainingFailed
from ..models.protocol import uses_site_updates
from .step import DataTerm, Prepare, SiteTerm, WithShared, minibatch_energy, strongly_typed
from .endings import refuse_impossible_energy
from .job import TrainResult
from .progress import Progress, no_progress, told
from .trainer import Trainer

FULL_BATCH_ROWS = 10_000
"""The most training rows an estimator fits full batch by default (``solver="auto"``): the rows of one of its
default batches (``batch_size`` 10,000). Up to here the estimators' Adam steps are full batch too, so an L-BFGS
iteration costs about one of them (more when its line search evaluates twice) and it takes tens where Adam
takes hundreds; larger data is left to minibatches, whose steps cost a fraction of a pass. The limit was 5,000
rows, the everyday tables of issue 63, until a table just past it showed the cliff: on waveform's first two classes
(5,325 training rows) ``SparseGPClassifier`` took 17.5 s of Adam's full-batch steps to L-BFGS's 7.7 s, the same
test NLL, and ``TiedEPClassifier``'s steps stopped 0.026 nats per row behind logistic regression, L-BFGS 0.002
ahead of it (docs/results/everyday.md, "Past 5,000 rows")."""

QUIET_ITERATIONS = 2  # iterations in a row that each raise the energy by less than tol nats per row
GRADIENT_TOL = 1e-6  # scipy's pgtol: the largest |∂F/∂θ| entry (nats per unit of an unconstrained parameter)
MEMORY = 20  # L-BFGS correction pairs (scipy's maxcor)
SITE_SWEEPS = 50  # the most site sweeps of one round (each a pass over every row)
SITE_TOL = 1e-8  # a sweep that moves no entry of the factor by more than this (relative) is at the fixed point
HYPER_ITERATIONS = 25  # the most L-BFGS iterations of one round between site sweeps


class FlatParams:
    """The trainable leaves of a params pytree as one float64 vector, and back (the frozen leaves kept)."""

    def __init__(self, params: Any, frozen: Any):
        leaves, self.structure = jax.tree_util.tree_flatten(params)
        self.free = [i for i, held in enumerate(jax.tree_util.tree_leaves(frozen)) if not held]
        self.shapes = [np.shape(leaves[i]) for i in self.free]
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]

    def vector(self, params: Any) -> np.ndarray:
        leaves = jax.tree_util.tree_leaves(params)
        return np.concatenate([np.ravel(np.asarray(leaves[i], np.float64)) for i in self.free] or [np.zeros(0)])

    def params(self, vector: np.ndarray, template: Any) -> Any:
        """``template`` (params) with its trainable leaves taken from ``vector``."""
        leaves = list(jax.tree_util.tree_leaves(template))
        for i, part, shape in zip(self.free, np.split(vector, np.cumsum(self.sizes)[:-1]), self.shapes):
            leaves[i] = jnp.asarray(part.reshape(shape), jnp.float64)
        return jax.tree_util.tree_unflatten(self.structure, leaves)


@partial(jax.jit, static_argnums=0)
def _energy(model, size, params, shared, pullback, data_value, data_grad, scale):
    return minibatch_energy(model, size, params, shared, pullback, data_value, data_grad, scale)


@partial(jax.jit, static_argnums=0)
def _site_update(model, params, shared, stats, size, damping):
    return model.site_update(params, shared, stats, size, damping)


@dataclass(frozen=True)
class SettledFactor:
    """The exact sites' fixed point on one block of rows, every training row of a collapsed fit: one undamped
    site update at ``(params, N)`` in one program (no pullback of the step-shared quantities, which a sweep of the
    step's own programs computes for its gradient), ``(params, accepted)``. Hashable, so every process compiles it
    once."""

    __name__ = "settled_factor"
    model: Any

    def __call__(self, inputs, x, y, mask):
        params, size = inputs
        shared = self.model.step_shared(params, size)
        params, _, accepted = self.model.site_update(params, shared, self.model.site_stats(params, shared, x, y, mask),
                                                     size, 1.0)
        return params, accepted


@dataclass
class _Counts:
    """What a fit has done so far."""

    iterations: int = 0  # L-BFGS iterations and site sweeps
    rejected_sites: int = 0
    energy: float = float("nan")  # at the params of the latest iteration
    swept: bool = False  # a site sweep moved the params since


class FullBatchFit:
    """The full-batch fit of a trainer's job (module docstring): the trainer's model, data, settings, starting
    params and progress events, with L-BFGS (and site sweeps) in place of its minibatch Adam steps.

    Args:
        trainer: the job's trainer (its engine computes the block sums).
        max_iterations: the most L-BFGS iterations and site sweeps in all.
        tol: the energy rise per training row below which an iteration counts as quiet (module docstring);
            0 stops only at the gradient tolerance, the line search's end or ``max_iterations``.
    """

    def __init__(self, trainer: Trainer, max_iterations: int, tol: float):
        self.trainer, self.max_iterations, self.tol = trainer, int(max_iterations), float(tol)
        self.model, self.spec, self.settings = trainer.model, trainer.spec, trainer.settings
        self.sites = uses_site_updates(self.spec, self.settings)
        self.blocks = range(trainer.train.source.n_blocks)
        self.scale = trainer.n_total / trainer.n_rows
        exact = self.sites and getattr(self.model, "collapsed", None) is not None
        self.damping = 1.0 if exact else None  # exact sites need no damping in a full batch (module docstring)
        self.collapsed = self.model.collapsed if exact and len(self.blocks) == 1 and self.scale == 1.0 else None
        self.opt_state: Any = None  # after run: a fresh Adam state at the final params (for partial_fit, save)

    # ---------------------------------------------------------------------------------------------
    def energy_and_grad(self, params: Any, model: Any = None) -> tuple[float, Any]:
        """``F`` and ``dF/dθ`` at ``params`` over every training row, from the engine's block sums: the energy of
        ``model`` (default the trainer's; the collapsed bound's with its params)."""
        model = self.model if model is None else model
        prepare = Prepare(model)
        with float64():
            size = on_device(np.float64(self.trainer.data_size))
            shared, pullback = derived(prepare, (params, size))
            value, grad = self.trainer.train.map_sum(Derived(DataTerm(model), WithShared(prepare)),
                                                     (params, size), self.blocks)
            energy, grad = _energy(model, size, params, shared, pullback, value, grad, self.scale)
            return float(energy), grad

    def sweep(self, params: Any) -> tuple[Any, bool]:
        """One site update from every row's statistics: undamped for exact sites, else damped as the step's own
        program damps its first step (``ρ_0``, the settings' ``damping``): ``(params, accepted)``."""
        prepare = Prepare(self.model)
        with float64():
            size = on_device(np.float64(self.trainer.data_size))
            shared, _ = derived(prepare, (params, size))
            stats = self.trainer.train.map_sum(Derived(SiteTerm(self.model), WithShared(prepare)),
                                               (params, size), self.blocks)
            if self.damping is None:
                params, _, accepted = self.trainer.step_fn.parts.site_update(params, shared, stats,
                                                                             on_device(np.int32(0)), size)
            else:
                params, _, accepted = _site_update(self.model, params, shared, stats, size, self.damping)
            return strongly_typed(params), bool(accepted)

    # ---------------------------------------------------------------------------------------------
    def run(self, progress: Progress = no_progress) -> TrainResult:
        """:meth:`fit` with one BLAS thread, as the trainer's run (:func:`~pep_gp.pipeline.engine.threads.compute_threads`)."""
        with compute_threads():
            return self.fit(progress)

    def fit(self, progress: Progress = no_progress) -> TrainResult:
        """Fit from the trainer's starting params (its model's ``init``, or the params it was given); tells
        ``progress`` the trainer's events (``start``; ``step`` per iteration, with the energy; one ``epoch``
        at the end with the held-out metrics). A callback's :class:`StopTraining` ends the fit."""
        trainer, counts = self.trainer, _Counts()
        start = trainer.fresh_state()
        stopped = told(progress, "start", step=0, total_steps=self.max_iterations, steps_per_epoch=1,
                        resumed_from=None, notes=trainer.notes, model=trainer.job.model_name,
                        model_settings=self.settings.model_dump(mode="json"),
                        config=trainer.job.config.model_dump(mode="json", exclude={"model"}))
        began = time.perf_counter()
        if self.collapsed is not None:
            params, converged, stopped = self._collapsed_fit(start.params, counts, progress, stopped)
        else:
            params, converged, stopped = self._rounds(start.params, counts, progress, stopped)
        seconds = time.perf_counter() - began
        energy = self.energy_and_grad(params)[0] if counts.swept or math.isnan(counts.energy) else counts.energy
        refuse_impossible_energy(self.model, params, energy, trainer.n_total)
        record = {"epoch": 1, "step": counts.iterations, "energy": energy, "energy_per_row": energy / trainer.n_total,
                  **trainer.evaluate(params), "rejected_steps": 0, "rejected_site_updates": counts.rejected_sites,
                  "seconds": round(seconds, 3)}
        asked = told(progress, "epoch", record=record, params=params)
        with float64():
            self.opt_state = trainer.step_fn.init(params).opt_state
        return TrainResult(params, counts.iterations, self.max_iterations, 1, seconds, None, [record], 0,
                           counts.rejected_sites, converged, float("nan"), True, trainer.notes, None,
                           stopped or asked)

    def _collapsed_fit(self, params: Any, counts: _Counts, progress: Progress,
                       stopped: str | None) -> tuple[Any, bool, str | None]:
        """L-BFGS on the collapsed bound over the hyper-parameters, then one (undamped) site sweep: exact sites reach
        their fixed point for the hyper-parameters in it from any factor, and there the energy is the bound (module
        docstring). ``(params, converged, stopped)``; the sweep is taken even after a callback's stop, so
        that the factor is always the fitted hyper-parameters' own."""
        model, converged = self.model, False
        frozen = self.spec.frozen(self.settings, params)
        flat = FlatParams(model.collapsed_params(params), model.collapsed_params(frozen))
        if stopped is None and self.max_iterations > 1:  # the last iteration is the sweep
            hypers, converged, stopped = self._lbfgs(flat, model.collapsed_params(params), self.max_iterations - 1,
                                                     counts, progress, self.collapsed)
            params = model.with_collapsed(params, hypers)
        with float64():
            size = on_device(np.float64(self.trainer.data_size))
            params, accepted = self.trainer.train.map_sum(SettledFactor(self.model), (params, size), self.blocks)
            params, accepted = strongly_typed(params), bool(accepted)
        counts.iterations += 1
        counts.rejected_sites += int(not accepted)
        counts.swept = not accepted  # the energy of the fixed point is the bound, L-BFGS's latest (module docstring)
        if stopped is None:
            stopped = told(progress, "step", step=counts.iterations, energy=counts.energy, accepted=accepted)
        return params, converged, stopped

    def _rounds(self, params: Any, counts: _Counts, progress: Progress,
                stopped: str | None) -> tuple[Any, bool, str | None]:
        """L-BFGS from ``params`` on the energy, in rounds after site sweeps for a model with site updates (module
        docstring): ``(params, converged, stopped)``."""
        flat, converged = FlatParams(params, self.spec.frozen(self.settings, params)), False
        while stopped is None and counts.iterations < self.max_iterations:
            before = counts.energy  # at the end of the last round
            if self.sites:
                params, stopped = self._sweeps(params, counts, progress)
                if stopped is not None or counts.iterations >= self.max_iterations:
                    break
            cap = self.max_iterations - counts.iterations
            params, converged, stopped = self._lbfgs(flat, params, min(cap, HYPER_ITERATIONS) if self.sites else cap,
                                                     counts, progress)
            if not self.sites or stopped is not None:
                break
            converged = abs(counts.energy - before) < self.tol * self.trainer.n_total  # a round that barely moved
            if converged:
                break
        return params, converged, stopped

    def _sweeps(self, params: Any, counts: _Counts, progress: Progress) -> tuple[Any, str | None]:
        """Site sweeps to the fixed point (:data:`SITE_TOL`, at most :data:`SITE_SWEEPS`): ``(params, stopped)``."""
        flat_all = FlatParams(params, jax.tree_util.tree_map(lambda _: False, params))
        for _ in range(SITE_SWEEPS):
            old = flat_all.vector(params)
            params, accepted = self.sweep(params)
            counts.iterations += 1
            counts.rejected_sites += int(not accepted)
            counts.energy, counts.swept = self.energy_and_grad(params)[0], False  # what the step event reports
            new = flat_all.vector(params)
            stopped = told(progress, "step", step=counts.iterations, energy=counts.energy, accepted=accepted)
            moved = np.max(np.abs(new - old)) if new.size else 0.0
            if (stopped is not None or not accepted or moved <= SITE_TOL * (1.0 + np.max(np.abs(old)))
                    or counts.iterations >= self.max_iterations):
                return params, stopped
        return params, None

    def _lbfgs(self, flat: FlatParams, params: Any, iterations: int, counts: _Counts, progress: Progress,
               bound: Any = None) -> tuple[Any, bool, str | None]:
        """L-BFGS-B on ``−F`` over ``flat``'s leaves from ``params``, at most ``iterations`` iterations:
        ``(params, converged, stopped)``; ``F`` the energy, or with ``bound`` the collapsed bound at its params
        ``params`` (no sweeps). With site updates every evaluation of the energy first moves the factor by one
        sweep from where the latest evaluation left it, as the minibatch step does before its gradient: at the
        fixed point the energy's gradient in the hyper-parameters is that of the energy with the factor at its
        fixed point (EP's energy is stationary in the sites, Rasmussen & Williams 2006, §3.6), and exact sites
        (the Gaussian regressor's) reach it in that one sweep, so L-BFGS sees one smooth function."""
        template, quiet, stopped = [params], [0], [None]
        sweeps = self.sites and bound is None
        counts.energy, counts.swept = float("nan"), False  # the first evaluation's (at ``params``)

        def at(vector):
            """The params of ``vector``: its leaves, the factor moved by a sweep with site updates."""
            with float64():
                params = flat.params(vector, template[0])
                if sweeps:
                    params, accepted = self.sweep(params)
                    counts.rejected_sites += int(not accepted)
                    template[0] = params
                return params

        def objective(vector):
            with float64():
                energy, grad = self.energy_and_grad(at(vector), bound)
            gradient = flat.vector(grad)
            finite = math.isfinite(energy) and bool(np.all(np.isfinite(gradient)))
            if math.isnan(counts.energy):  # the first evaluation, at ``params``: no step can leave a non-finite start
                if not finite:
                    raise non_finite_start(energy, gradient, counts.iterations)
                counts.energy = energy
            if not finite:
                return math.inf, np.zeros_like(vector)  # the line search steps back from it
            return -energy, -gradient

        def iterated(intermediate_result):
            energy = -float(intermediate_result.fun)
            rise, counts.energy = energy - counts.energy, energy
            counts.iterations += 1
            quiet[0] = quiet[0] + 1 if math.isfinite(rise) and rise < self.tol * self.trainer.n_total else 0
            stopped[0] = told(progress, "step", step=counts.iterations, energy=energy, accepted=True)
            if stopped[0] is not None or (self.tol > 0 and quiet[0] >= QUIET_ITERATIONS):
                raise StopIteration

        result = scipy.optimize.minimize(objective, flat.vector(params), jac=True, method="L-BFGS-B",
                                         callback=iterated, options={"maxiter": iterations, "maxcor": MEMORY,
                                                                     "gtol": GRADIENT_TOL, "ftol": 0.0})
        with float64():
            params = strongly_typed(at(result.x))
        counts.swept = sweeps  # the final energy is that of the factor this last sweep moved
        counts.energy = -float(result.fun) if math.isfinite(result.fun) else counts.energy
        converged = quiet[0] >= QUIET_ITERATIONS or (result.status == 0 and result.nit < iterations) or (
            result.status == 2)  # 2: the line search found no higher energy (at the optimum to rounding)
        return params, bool(converged), stopped[0]


def non_finite_start(energy: float, gradient: np.ndarray, iterations: int) -> TrainingFailed:
    """The failure of an L-BFGS run whose starting energy or gradient is not finite: scipy would call the zero
    gradient it is given there converged, and the fit would end where it began, untrained."""
    where = "the starting parameters" if iterations == 0 else f"the parameters after {iterations} site sweeps"
    bad = int(np.sum(~np.isfinite(gradient)))
    return TrainingFailed(f"the full-batch fit cannot start: at {where} the energy is {energy:.6g} and {bad} of "
                          f"{gradient.size} gradient entries are not finite, so nothing was fitted; check the data "
                          "and the model's settings (its starting values, alpha, the likelihood)")


__all__ = ["FULL_BATCH_ROWS", "FullBatchFit"]
