"""The class-parallel step of multi-class SEP: the step of :mod:`pep_gp.pipeline.training.step` for
:class:`~pep_gp.core.models.multiclass.MultiClassGP` with site updates, split by classes.

Only the per-row factors of Villacampa-Calvo & Hernández-Lobato (2017, eq. 6) couple the classes, and they
see each class only through its cavity along the rows' directions (``a = υᵀm``, ``w = υᵀVυ``) and the
FITC variances: ``[B, C]`` numbers (:meth:`~pep_gp.core.models.multiclass.MultiClassGP.class_marginals`).
Everything else of a step — ``K_c``, its Cholesky factors, the cavities and ``q``, the rows' projections
``υ = K_c⁻¹k_c(x)`` (the ``[C, M, D]`` products), the damped tied-factor update (§2.3.1) and the chain rule
back to ``θ_c``, ``Z_c`` (eq. 10) — is each class's own. A :class:`ClassGroup` holds some classes' parameters,
optimiser moments and what a step keeps; a step is (:meth:`ClassParallelStep.update`):

1. ``prepare``: each group computes its classes' step-shared quantities, rows and marginals ``[B, C_g]``;
2. the coordinator gathers them in class order into ``[B, C]`` and computes the refined sites'
   coefficients ``Δ``, ``μ̃`` ``[B, C]`` (eqs. 26–27, 43–55);
3. ``sites``: each group sums its columns into its tied factors' new values and, in the same call, computes
   the cavities and their marginals with them; the update is taken for every class or for none (a non-finite
   one anywhere rejects it, as :func:`pep_gp.core.sep.damped_site_update`): only then does a second call,
   ``reject_sites``, compute them again with the old factors (one round trip per step fewer in the common
   case, the same programs and bits either way);
4. the coordinator computes the data term ``L`` (eq. 34) and its cotangents w.r.t. the marginals;
5. ``gradient``: each group pulls its columns back to its parameters and adds its global term ``G_c``'s
   gradient (eq. 9); the coordinator forms ``F̂ = Σ_c G_c + (N/|B|)L`` (the sum in class order) and the
   ascent guard (all of ``F̂`` and every gradient finite);
6. ``ascend``: each group takes its optimiser step (an elementwise optimiser such as Adam: a class's
   moments are its own), with the next step's first call (or when the state is asked for).

Every per-class computation is one compiled program over one class, so a class's numbers do not depend on
the group that holds it: the parameters after any number of steps are the same bits for every grouping, in
this process or on workers (:class:`Groups`, placed by the engine's backend). They equal the step of
:mod:`~pep_gp.pipeline.training.step` (whose programs cover all classes at once) to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...core import float64, sep
from ...core.bank import Marginals
from ...core.models.multiclass import MultiClassGP
from ..data.blocks import BlockSource
from ..engine.cache import BLOCKS
from ..engine.in_process import InThreads, Placement
from .step import StepInfo, all_finite, guarded_update, minibatch_energy, strongly_typed


@dataclass(frozen=True)
class AtCounts:
    """``model`` whose global energy takes the factor counts ``n_c`` of the classes it is given (any
    subset), for :func:`~pep_gp.pipeline.training.step.minibatch_energy`."""

    model: MultiClassGP

    def global_energy(self, params, shared, counts):
        return self.model.global_energy_at(params, shared, counts)


class ClassPrograms(NamedTuple):
    """The compiled programs of one class (inputs with a leading class axis of 1)."""

    prepare: Callable  # (θ_c, n_c, x) -> (marginals, kept)
    sites: Callable  # (θ_c, rows, Δ, μ̃, n_{B,c}, n_c, step) -> (new factor, finite)
    refresh: Callable  # (ok, new factor, θ_c, S_c, n_c, rows) -> (θ_c, S_c, marginals, their pullback)
    gradient: Callable  # (θ_c, S_c, pullbacks, cotangents, N/|B|, n_c, S's structure) -> (G_c, ∂F̂/∂θ_c, finite)
    ascend: Callable  # (ok, θ_c, optimiser state, gradient) -> (θ_c, optimiser state)


@lru_cache(maxsize=8)
def class_programs(model: MultiClassGP, optimizer: optax.GradientTransformation,
                   damping: optax.ScalarOrSchedule) -> ClassPrograms:
    """The per-class programs of the class-parallel step of ``model`` (see the module docstring)."""
    counted = AtCounts(model)

    def prepare(params, counts, x):
        shared, shared_pullback = jax.vjp(lambda p: model.step_shared_at(p, counts), params)
        rows, rows_pullback = jax.vjp(lambda p, s: model.block_rows(p, s, x), params, shared)
        marginals, fitc = model.class_marginals(rows, model.held(shared))
        return (marginals.mean, marginals.var, fitc), (shared, shared_pullback, rows, rows_pullback)

    def site_factor(params, rows, delta, mu, count, counts, step):
        shift, precision = model.site_sums(rows, delta, mu)
        new = sep.damped_factor(params.factor, shift, precision, count, counts,
                                damping(step) if callable(damping) else damping)
        return new, sep.factor_finite(new)

    def refresh(ok, new, params, shared, counts, rows):
        params, shared = model.with_factor(params, shared, sep.chosen_factor(ok, new, params.factor), counts)
        (marginals, fitc), pullback = jax.vjp(lambda r: model.class_marginals(r, model.held(shared)), rows)
        return params, shared, (marginals.mean, marginals.var, fitc), pullback

    def gradient(params, shared, pullbacks, cotangents, scale, counts, structure):
        shared_pullback, rows_pullback, marginals_pullback = pullbacks
        mean, var, fitc = cotangents
        (rows_grad,) = marginals_pullback((Marginals(mean, var), fitc))
        grad_params, grad_shared = rows_pullback(rows_grad)
        (through_shared,) = shared_pullback(grad_shared)
        data_grad = jax.tree_util.tree_map(jnp.add, grad_params, through_shared)
        value, grad = minibatch_energy(counted, counts, params, shared, shared_pullback, jnp.zeros(()),
                                       (data_grad, None), scale, structure)
        return value, grad, all_finite(grad)

    def ascend(ok, params, opt_state, grad):
        return guarded_update(optimizer, params, opt_state, grad, ok)

    return ClassPrograms(jax.jit(prepare), jax.jit(site_factor), jax.jit(refresh),
                         jax.jit(gradient, static_argnames="structure"), jax.jit(ascend))


def class_part(tree, index: int):
    """Class ``index`` of ``tree`` (params or optimiser state): every leaf with a leading class axis cut to
    ``[index:index + 1]``; scalars (the optimiser's step count) as they are."""
    return jax.tree_util.tree_map(lambda leaf: leaf[index:index + 1] if jnp.ndim(leaf) else leaf, tree)


def joined(parts: list):
    """The tree of all classes from :func:`class_part`'s parts, in class order."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves) if jnp.ndim(leaves[0]) else leaves[0],
                                  *parts)


class ClassGroup:
    """Some classes of a class-parallel step, resident where they are computed: each class's parameters and
    optimiser state, and what the current step keeps between its phases. Every method takes and returns
    the group's columns (``[B, C_g]``, or ``[C_g]``) in class order; pickled, it carries its state only."""

    def __init__(self, model: MultiClassGP, optimizer: optax.GradientTransformation,
                 damping: optax.ScalarOrSchedule, params: list, opt_states: list):
        self.model, self.optimizer, self.damping = model, optimizer, damping
        self.params, self.opt_states = list(params), list(opt_states)
        self.kept: list = []
        self.start: list = self.params  # the parameters the latest step started from
        self.best: list | None = None  # those of the step the coordinator kept as its best

    def __getstate__(self) -> dict:
        """The state as host arrays (device arrays unpickled outside a float64 context would be float32)."""
        params = jax.device_get(self.params)
        return {**self.__dict__, "params": params, "opt_states": jax.device_get(self.opt_states), "kept": [],
                "start": params, "best": jax.device_get(self.best)}

    def catch_up(self, pending=None, keep_start: bool = False) -> None:
        """What the coordinator decided after the latest step, done with the next call: that step's start
        kept as the best parameters (``keep_start``), then its optimiser step where its guard ``pending`` is
        given (:meth:`ascend`)."""
        if keep_start:
            self.best = self.start
        if pending is not None:
            self.ascend(pending)

    @property
    def programs(self) -> ClassPrograms:
        return class_programs(self.model, self.optimizer, self.damping)

    def prepare(self, x, counts, pending=None, keep_start: bool = False) -> tuple:
        """Phase 1: the classes' marginals ``(mean, var, fitc)``, ``[B, C_g]`` each, at the rows ``x`` (an
        array ``[B, D]``, or :class:`StoreRows`); first what is left of the previous step (:meth:`catch_up`:
        one call per step fewer)."""
        self.catch_up(pending, keep_start)
        self.start = list(self.params)
        x = x.inputs() if isinstance(x, StoreRows) else x
        self.kept, columns = [], []
        for j, params in enumerate(self.params):
            count = counts[j:j + 1]
            marginals, (shared, shared_pullback, rows, rows_pullback) = self.programs.prepare(params, count, x)
            self.kept.append({"counts": count, "shared": shared, "structure": jax.tree_util.tree_structure(shared),
                              "pullbacks": (shared_pullback, rows_pullback), "rows": rows})
            columns.append(marginals)
        return _columns(columns)

    def sites(self, delta, mu, count, step) -> tuple:
        """Phase 3: each class's new tied factor from its columns of ``Δ``, ``μ̃`` ``[B, C_g]`` and its factor
        count ``n_{B,c}`` ``[C_g]`` in the minibatch, whether each is finite ``[C_g]``, and :meth:`refresh`'s
        marginals with the new factors (taken unless a class anywhere rejects them: :meth:`reject_sites`)."""
        finite = []
        for j, (params, kept) in enumerate(zip(self.params, self.kept)):
            kept["new"], ok = self.programs.sites(params, kept["rows"], delta[:, j:j + 1], mu[:, j:j + 1],
                                                  count[j:j + 1], kept["counts"], step)
            kept["before"] = params, kept["shared"]
            finite.append(ok)
        return jnp.stack(finite), self.refresh(np.asarray(True))

    def reject_sites(self) -> tuple:
        """:meth:`refresh` with the old tied factors, after :meth:`sites` took the new ones."""
        for j, kept in enumerate(self.kept):
            self.params[j], kept["shared"] = kept["before"]
            kept["pullbacks"] = kept["pullbacks"][:2]
        return self.refresh(np.asarray(False))

    def refresh(self, ok) -> tuple:
        """The tied factors (the new ones where ``ok``), the cavities and their marginals."""
        columns = []
        for j, kept in enumerate(self.kept):
            self.params[j], kept["shared"], marginals, pullback = self.programs.refresh(
                ok, kept["new"], self.params[j], kept["shared"], kept["counts"], kept["rows"])
            kept["pullbacks"] += (pullback,)
            columns.append(marginals)
        return _columns(columns)

    def gradient(self, cotangents, scale) -> tuple:
        """Phase 5: each class's gradient from its columns of the data term's cotangents; the classes' global
        terms ``G_c`` and whether each gradient is finite, ``[C_g]`` each."""
        values, finite = [], []
        for j, kept in enumerate(self.kept):
            value, kept["grad"], ok = self.programs.gradient(
                self.params[j], kept["shared"], kept["pullbacks"], tuple(c[:, j:j + 1] for c in cotangents), scale,
                kept["counts"], kept["structure"])
            values.append(value)
            finite.append(ok)
        return jnp.stack(values), jnp.stack(finite)

    def ascend(self, ok) -> None:
        """Phase 6: each class's optimiser step (where ``ok``); the step's kept quantities are released."""
        for j, kept in enumerate(self.kept):
            self.params[j], self.opt_states[j] = self.programs.ascend(ok, self.params[j], self.opt_states[j],
                                                                      kept["grad"])
        self.kept = []

    def state(self, pending=None, keep_start: bool = False) -> tuple[list, list]:
        """The classes' parameters and optimiser states (after :meth:`catch_up`)."""
        self.catch_up(pending, keep_start)
        return self.params, self.opt_states

    def best_params(self, pending=None, keep_start: bool = False) -> list | None:
        """The classes' best parameters (after :meth:`catch_up`); None before one was kept."""
        self.catch_up(pending, keep_start)
        return self.best


class StoreRows(NamedTuple):
    """A minibatch's rows as blocks of a store: each group reads their inputs where it is computed (through
    the engine's block cache, :data:`~pep_gp.pipeline.engine.cache.BLOCKS`), so they do not travel with
    every step."""

    source: BlockSource
    blocks: tuple[int, ...]

    def inputs(self):
        """The blocks' inputs, one after the other, ``[B, D]``."""
        return jnp.concatenate([block.x for block in BLOCKS.get_all(self.source, self.blocks)])


def _columns(per_class: list) -> tuple:
    """``(mean, var, fitc)`` of several classes, ``[B, 1]`` each, side by side in class order."""
    return tuple(jnp.concatenate(parts, axis=1) for parts in zip(*per_class))


class Groups:
    """Class groups where they are computed (a :class:`~pep_gp.pipeline.engine.in_process.Placement` of them:
    ``place``, a backend's ``place``, or :class:`~pep_gp.pipeline.engine.in_process.InThreads` in this
    process), and what the coordinator carries from one step to the next.

    Args:
        groups: the class groups, in class order (:meth:`ClassParallelStep.groups`).
        place: places them (on Dask workers: a step sends each worker the minibatch's rows and its columns of
            the ``[B, C]`` numbers, and receives its classes' columns and scalars).
    """

    def __init__(self, groups: list[ClassGroup], place: Callable[[list], Placement] = InThreads):
        self.sizes = [len(group.params) for group in groups]  # the number of classes of each group, in class order
        self.pending = None  # the latest step's guard while its optimiser steps are still to be taken
        self.keep_start = False  # the latest step's start is to be kept as the best parameters (ClassGroup.catch_up)
        self.placement = place(groups)

    def each(self, method: str, args: list[tuple]) -> list:
        """``group.method(*args[g])`` on every group ``g``, the results in group order."""
        return self.placement.each(method, args)

    def release(self) -> None:
        """Release the groups (their threads, or their memory on the workers)."""
        self.placement.release()


@dataclass(frozen=True)
class ClassParallelStep:
    """The class-parallel step of ``model`` with ``optimizer`` and the site update's ``damping`` (the
    arguments of :func:`~pep_gp.pipeline.training.step.training_step` with ``sites=True``)."""

    model: MultiClassGP
    optimizer: optax.GradientTransformation
    damping: optax.ScalarOrSchedule = 1.0

    def groups(self, params, opt_state, n_groups: int) -> list[ClassGroup]:
        """``params`` and ``opt_state`` (as :func:`~pep_gp.pipeline.training.step.training_step`'s ``init``
        makes them) in ``n_groups`` groups of consecutive classes, as equal in size as they can be."""
        if not 1 <= n_groups <= self.model.num_classes:
            raise ValueError(f"the class groups must number 1..{self.model.num_classes} (one class at least "
                             f"each); got {n_groups}")
        spans = np.array_split(np.arange(self.model.num_classes), n_groups)
        return [ClassGroup(self.model, self.optimizer, self.damping, [class_part(params, c) for c in span],
                           [class_part(opt_state, c) for c in span]) for span in spans]

    def init(self, params, n_groups: int) -> list[ClassGroup]:
        """:meth:`groups` of the optimiser's start from ``params``."""
        with float64():
            params = strongly_typed(params)
            return self.groups(params, self.optimizer.init(params), n_groups)

    def state(self, groups: Groups) -> tuple[Any, Any]:
        """The parameters and optimiser state of all classes."""
        with float64():
            params, opt_states = zip(*groups.each("state", [_left_over(groups)] * len(groups.sizes)))
            return joined([p for part in params for p in part]), joined([s for part in opt_states for s in part])

    def best(self, groups: Groups) -> Any:
        """The best parameters the groups kept (:attr:`Groups.keep_start`) of all classes."""
        with float64():
            parts = groups.each("best_params", [_left_over(groups)] * len(groups.sizes))
            if any(part is None for part in parts):
                raise RuntimeError("no best parameters were kept in the class groups")
            return joined([p for part in parts for p in part])

    def update(self, groups: Groups, step: int, x, y, mask, scale: float, class_rows) -> StepInfo:
        """One step on the rows ``x`` ``[B, D]`` (or :class:`StoreRows`), ``y``, ``mask`` (``scale`` = N/|B|;
        ``class_rows`` the data's ``N_c``; ``step`` the steps taken, for the damping schedule)."""
        rows, sizes = row_programs(self.model), groups.sizes
        with float64():
            counts = self.model.factor_counts(jnp.asarray(class_rows, jnp.float64))
            y, mask, scale = jnp.asarray(y), jnp.asarray(mask), jnp.asarray(scale, jnp.float64)
            step = jnp.asarray(step, jnp.int32)
            left = _left_over(groups)
            marginals = _gathered(groups.each("prepare", [(x, part, *left) for part in _split(counts, sizes)]))
            delta, mu, count = rows.sites(*marginals, y, mask)
            finite, marginals = zip(*groups.each("sites", [(d, m, c, step) for d, m, c in zip(
                _split(delta, sizes, 1), _split(mu, sizes, 1), _split(count, sizes))]))
            sites_ok = jnp.all(jnp.concatenate(finite))
            marginals = _gathered(marginals if sites_ok else groups.each("reject_sites", [()] * len(sizes)))
            value, cotangents = rows.data(*marginals, y, mask)
            parts = groups.each("gradient", [(tuple(c[:, s] for c in cotangents), scale) for s in _slices(sizes)])
            values, finite = (jnp.concatenate(p) for p in zip(*parts))
            energy, groups.pending = rows.guard(values, value, finite, scale)  # ascend with the next call
            return StepInfo(energy, groups.pending, sites_ok)


class RowPrograms(NamedTuple):
    """The coordinator's programs over all classes' ``[B, C]`` marginals (the per-row factors of eq. 6)."""

    sites: Callable  # (mean, var, fitc, y, mask) -> (Δ, μ̃, n_{B,c})
    data: Callable  # (mean, var, fitc, y, mask) -> (L, its cotangents w.r.t. mean, var, fitc)
    guard: Callable  # (G_c [C], L, finite [C], N/|B|) -> (F̂, ok)


@lru_cache(maxsize=8)
def row_programs(model: MultiClassGP) -> RowPrograms:
    """The :class:`RowPrograms` of ``model``."""

    def row_sites(mean, var, fitc, y, mask):
        delta, mu = model.row_site_coefficients(Marginals(mean, var), fitc, y, mask)
        return delta, mu, model.site_counts(y.astype(jnp.int32), mask)

    def row_data(mean, var, fitc, y, mask):
        value, (marginals, fitc_grad) = jax.value_and_grad(
            lambda m, f: model.row_energy(m, f, y, mask), argnums=(0, 1))(Marginals(mean, var), fitc)
        return value, (marginals.mean, marginals.var, fitc_grad)

    def guard(values, data_value, finite, scale):
        energy = jnp.sum(values) + scale * data_value
        return energy, jnp.isfinite(energy) & jnp.all(finite)

    return RowPrograms(jax.jit(row_sites), jax.jit(row_data), jax.jit(guard))


def _left_over(groups: Groups) -> tuple:
    """The arguments of :meth:`ClassGroup.catch_up` (what the latest step left), now taken."""
    left = (groups.pending, groups.keep_start)
    groups.pending, groups.keep_start = None, False
    return left


def _slices(sizes: list[int]) -> list[slice]:
    ends = np.cumsum(sizes)
    return [slice(int(end - size), int(end)) for size, end in zip(sizes, ends)]


def _split(array, sizes: list[int], axis: int = 0) -> list:
    """``array``'s parts along ``axis`` for groups of ``sizes`` classes."""
    return [array[(slice(None),) * axis + (part,)] for part in _slices(sizes)]


def _gathered(parts: list[tuple]) -> tuple:
    """The groups' ``(mean, var, fitc)`` columns side by side, ``[B, C]`` each."""
    return tuple(jnp.concatenate([jnp.asarray(p) for p in pieces], axis=1) for pieces in zip(*parts))
