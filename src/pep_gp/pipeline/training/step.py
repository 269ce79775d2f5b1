"""The training step: one pure ``init``/``update`` pair in the optax style, the only training loop body
in pep. The trainer runs it with a Dask or in-process engine over store blocks; the estimators run the
same trainer over in-memory arrays.

Each ``update(state, batch)`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3):

1. computes the step-shared quantities ``S = step_shared(θ, N)`` once, with their pullback
   (:class:`Prepare`; ``N`` the data's size as the model takes it, ``batch.data_size``); a pass over the
   blocks sends ``(θ, N)``, and wherever blocks are computed ``S`` is
   computed again by the same compiled program (:class:`WithShared`), so it never travels;
2. for models with site updates, sums the site statistics over the minibatch and applies the damped
   tied-factor update (``ρ_t = ρ·decay^t``), refreshing ``S`` — the factor is refined first and the
   gradient taken with the new factor;
3. sums the data term and its gradients w.r.t. ``θ`` and ``S`` over the minibatch, forms
   ``F̂ = G(θ, S) + (N/|B|)·Σ_B L`` and ``dF̂/dθ = ∂G/∂θ + (N/|B|)Σ∂L/∂θ + pullback(∂G/∂S + (N/|B|)Σ∂L/∂S)``
   (the chain rule through ``S``), and takes a guarded ascent step with the optimiser: a non-finite
   energy or gradient leaves params and optimiser state unchanged and is reported.

A model whose block term factors through per-row quantities that a site update leaves unchanged
(:class:`RowSplit`, the multi-class SEP model) has them computed once per block: the site-statistics
pass keeps them, with their pullback, where the block was computed (its handle, a
:class:`~pep_gp.pipeline.engine.Pass`), and the data-term pass submitted from that handle uses them with the
refreshed (held) part of ``S`` — the only thing the second pass sends.

``batch`` is a :class:`Minibatch`: sums over the minibatch's blocks in a fixed order
(:class:`~pep_gp.pipeline.engine.Engine`). Every backend runs the same compiled programs — the three
coordinator calls here and the block functions — so the results are bit-for-bit those of any other
backend. (One compiled program for the whole step, tried in-process, was ~7 % faster on Fashion-MNIST but
not bit-identical: XLA:CPU contracts a multiply and an add into one FMA only where they land in one
fused kernel, so the rounding of Adam's moments followed the program's boundaries.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...core import float64
from ...core.parameters import on_device
from ..engine.cache import Derived, compiled_program, derived
from ..models.protocol import Energy, SiteUpdates


class StepState(NamedTuple):
    """What the step carries from one call to the next."""

    params: Any
    opt_state: Any
    count: jnp.ndarray  # shape=(), int32: steps taken (drives the damping decay)


class StepInfo(NamedTuple):
    """What one step reports."""

    energy: jnp.ndarray  # shape=(): the minibatch estimate F̂ before the ascent step
    accepted: jnp.ndarray  # shape=(), bool: the ascent step was taken (finite energy and gradient)
    sites_accepted: jnp.ndarray  # shape=(), bool: the site update was taken (True without one)


class Minibatch(Protocol):
    """The rows of one step, as the step sees them."""

    scale: float  # N / |B|
    data_size: Any  # the training data's size as the model's energy takes it (ModelSpec.data_size): N, or N_c

    def submit(self, fn: Callable, inputs: Any, kept: Any = None, keep: bool = False) -> Any:
        """``Σ_blocks fn(inputs, x, y, mask)`` over the minibatch, in a fixed order, as a handle whose ``sum()``
        is the sum (:class:`~pep_gp.pipeline.engine.Pass`). With ``keep``, ``fn`` returns ``(result, kept)``
        and each block's ``kept`` stays where the block was computed; that handle given as ``kept``, the sum
        is ``Σ_blocks fn(inputs, keeping_inputs, kept, y, mask)`` from what it kept and the block inputs it
        ran with; the handle's ``release()`` lets what it kept go."""


@runtime_checkable
class RowSplit(SiteUpdates, Protocol):
    """A model with site updates whose block term is ``f(block_rows(θ, S, x), held(S), y, mask)``: per-row
    quantities that are differentiable and unchanged by a site update, and the part of ``S`` that the
    site update refreshes and the data term holds fixed (SEP's cavity, Villacampa-Calvo &
    Hernández-Lobato 2017, eq. 10)."""

    def block_rows(self, params: Any, shared: Any, x: Any) -> Any:
        """The rows' quantities (e.g. ``υ = K⁻¹k(x)`` and the FITC variances)."""

    def held(self, shared: Any) -> Any:
        """The part of ``shared`` a site update changes."""

    def site_stats_at(self, rows: Any, held: Any, y: Any, mask: Any) -> Any:
        """``site_stats`` from the rows' quantities."""

    def data_energy_at(self, rows: Any, held: Any, y: Any, mask: Any) -> Any:
        """``data_energy`` from the rows' quantities (the step differentiates it w.r.t. ``rows`` only)."""


class StepParts(NamedTuple):
    """The compiled pieces ``update`` is made of (for profiling, :mod:`benchmarks.bench_sep_step`)."""

    prepare: Callable  # params -> (S, pullback of S)
    site_update: Callable  # (params, S, stats, count) -> (params, S refreshed, accepted)
    ascend: Callable  # (params, opt_state, S, pullback, data value, data grads, scale, S's structure) -> params, opt_state, ok, F̂
    data_term: Callable  # the per-block data term: DataTerm, or RowDataTerm after a RowSiteTerm
    site_term: Callable | None  # the per-block site statistics: SiteTerm or RowSiteTerm (None without sites)


@dataclass(frozen=True)
class Prepare:
    """``(S, pullback of S)`` with ``S = step_shared(θ, N)``: one compiled program, run by the coordinator
    and by every process that computes a step's blocks on ``(θ, N)`` (:class:`WithShared`). Hashable, so
    every process compiles it once."""

    __name__ = "prepare"
    model: Energy

    def __call__(self, params, size):
        return jax.vjp(lambda p: self.model.step_shared(p, size), params)


@dataclass(frozen=True)
class WithShared:
    """A block function's inputs ``(θ, S)`` from the pass's ``(θ, N)``: ``S`` computed where the blocks
    are, by :class:`Prepare`'s compiled program — the same bits as the coordinator's, so the
    step-shared quantities (O(C·M²) numbers for multi-class SEP) never travel."""

    prepare: Prepare
    pullback: bool = False  # also the pullback of ``S``: inputs ``(θ, S, pullback)`` (:class:`RowSiteTerm`)

    def __call__(self, inputs):
        params, _ = inputs
        shared, pullback = derived(self.prepare, inputs)
        return (params, shared, pullback) if self.pullback else (params, shared)


@dataclass(frozen=True)
class DataTerm:
    """Per-block data term and its gradient w.r.t. the params and the step-shared quantities; input
    ``(params, shared)``. Hashable, so every process compiles it once."""

    __name__ = "data_term"  # the name of its compiled program (jax_log_compiles, profiles)
    model: Energy

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return jax.value_and_grad(self.model.data_energy, argnums=(0, 1))(params, shared, x, y, mask)


@dataclass(frozen=True)
class SiteTerm:
    """Per-block site statistics (models with site updates); input ``(params, shared)``."""

    __name__ = "site_term"
    model: SiteUpdates

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return self.model.site_stats(params, shared, x, y, mask)


@dataclass(frozen=True)
class RowSiteTerm:
    """Per-block site statistics of a :class:`RowSplit` model, keeping the rows' quantities and their
    pullback (w.r.t. ``(params, shared)``) for :class:`RowDataTerm`; input ``(params, shared, pullback of
    shared)`` (:class:`Prepare`'s), which the engine holds once per process for the second pass."""

    __name__ = "row_site_term"
    model: RowSplit

    def __call__(self, inputs, x, y, mask):
        params, shared, _ = inputs
        rows, pullback = jax.vjp(lambda p, s: self.model.block_rows(p, s, x), params, shared)
        return self.model.site_stats_at(rows, self.model.held(shared), y, mask), (rows, pullback)


@dataclass(frozen=True)
class RowDataTerm:
    """Per-block data term of a :class:`RowSplit` model and its gradient w.r.t. the params, the part
    through ``shared`` pulled back by the block itself with the step's pullback (so a block sends
    ``∂L/∂θ`` only: the C·M² entries of ``∂L/∂K⁻¹`` stay where the block was computed), from what
    :class:`RowSiteTerm` kept and its inputs (the step's pullback of ``shared`` among them, one per
    process); input: the refreshed held part of ``shared``. Returns ``(value, (∂L/∂θ, None))``: no ``S``
    part for :func:`minibatch_energy`."""

    __name__ = "row_data_term"
    model: RowSplit

    def __call__(self, held, site_inputs, kept, y, mask):
        _, _, shared_pullback = site_inputs
        rows, pullback = kept
        value, rows_grad = jax.value_and_grad(self.model.data_energy_at)(rows, held, y, mask)
        grad_params, grad_shared = pullback(rows_grad)
        (through_shared,) = shared_pullback(grad_shared)
        return value, (jax.tree_util.tree_map(jnp.add, grad_params, through_shared), None)


def strongly_typed(tree):
    """``tree`` with every leaf a strongly typed array of its own dtype.

    A weakly typed leaf (``jnp.full(C, 1.0)``: a Python float's type) and the strongly typed leaf the
    optimiser returns for it are different input types to ``jit``, so the step's programs would compile
    again at the second step; starting from strong types every program compiles once."""
    return jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=jnp.result_type(leaf)), tree)


def all_finite(tree) -> jnp.ndarray:
    """True when every leaf of ``tree`` is finite."""
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]))


def ascent_update(optimizer: optax.GradientTransformation, params, opt_state, value, grad):
    """One guarded ascent step on ``value`` with gradient ``grad``: ``(params, opt_state, accepted)``.

    The guard is a conditional around the optimiser (as optax's ``apply_if_finite``): a finite step runs
    the optimiser and applies its update in one pass over the parameters and moments; a non-finite one
    leaves both as they were. No select over the arrays after the fact."""
    ok = jnp.isfinite(value) & all_finite(grad)
    new_params, new_state = guarded_update(optimizer, params, opt_state, grad, ok)
    return new_params, new_state, ok


def guarded_update(optimizer: optax.GradientTransformation, params, opt_state, grad, ok):
    """:func:`ascent_update` where the guard ``ok`` was decided elsewhere (the class-parallel step decides
    it once for all classes, :mod:`pep_gp.pipeline.training.class_groups`): ``(params, opt_state)``."""

    def take(operands):
        params, opt_state, grad = operands
        updates, new_state = optimizer.update(jax.tree_util.tree_map(jnp.negative, grad), opt_state, params)
        return optax.apply_updates(params, updates), new_state

    def keep(operands):
        params, opt_state, _ = operands
        return params, opt_state

    return jax.lax.cond(ok, take, keep, (params, opt_state, grad))


def cut_to(structure, tree):
    """``tree`` cut to ``structure`` (a pytree structure it extends): the subtrees where ``structure``
    holds None are dropped — e.g. the ``q`` that a site update adds to the step-shared quantities, which
    carries no gradient, before the cotangent goes to the pullback of ``step_shared``."""
    template = jax.tree_util.tree_unflatten(structure, [0] * structure.num_leaves)
    return jax.tree_util.tree_map(lambda kept, leaf: None if kept is None else leaf, template, tree,
                                  is_leaf=lambda node: node is None)


def minibatch_energy(model: Energy, size: Any, params, shared, pullback: Callable, data_value, data_grad,
                     scale, structure=None) -> tuple[Any, Any]:
    """``F̂ = G(θ, S) + scale·Σ_B L`` and its gradient from the summed block results (the value, and the
    gradients w.r.t. ``θ`` and ``S``): ``∂G/∂θ + scale·Σ∂L/∂θ + pullback(∂G/∂S + scale·Σ∂L/∂S)``, the
    chain rule through ``S = step_shared(θ)`` whose ``pullback`` is its VJP; ``structure``: that of
    ``step_shared``'s output when ``shared`` has more (:func:`cut_to`)."""
    global_value, (global_grad, global_shared_grad) = jax.value_and_grad(
        model.global_energy, argnums=(0, 1))(params, shared, size)

    def plus_scaled(total, part):
        return jax.tree_util.tree_map(lambda a, b: a + scale * b, total, part)

    data_grad_params, data_grad_shared = data_grad
    if structure is not None:
        global_shared_grad = cut_to(structure, global_shared_grad)
    if data_grad_shared is None:  # the blocks pulled their part back themselves (RowDataTerm)
        (through_shared,) = pullback(global_shared_grad)
    else:
        if structure is not None:
            data_grad_shared = cut_to(structure, data_grad_shared)
        (through_shared,) = pullback(plus_scaled(global_shared_grad, data_grad_shared))
    grad = jax.tree_util.tree_map(jnp.add, plus_scaled(global_grad, data_grad_params), through_shared)
    return global_value + scale * data_value, grad


def training_step(model: Energy, optimizer: optax.GradientTransformation, *, sites: bool = False,
                  damping: optax.ScalarOrSchedule = 1.0) -> TrainStep:
    """The step of ``model`` (see the module docstring). The training data's size (``N``, or for the
    multi-class models the rows of each class) comes with each minibatch (``batch.data_size``) as an argument
    of the compiled programs, so splits of other sizes or class balances with blocks of the same shape
    (cross-validation folds) share one compilation.

    Args:
        model: the energy (a :class:`~pep_gp.pipeline.models.protocol.SiteUpdates` when ``sites``; a
            :class:`RowSplit` one computes its rows once per block).
        optimizer: any optax transformation; it receives the negated gradient (ascent).
        sites: gather site statistics and update the tied factor before the gradient step.
        damping: the site update's step ``ρ``, or a schedule ``t ↦ ρ_t``
            (:meth:`~pep_gp.pipeline.models.protocol.SiteSettings.damping_schedule`).
    """
    rows = sites and isinstance(model, RowSplit)
    site_term = (RowSiteTerm(model) if rows else SiteTerm(model)) if sites else None
    data_term = RowDataTerm(model) if rows else DataTerm(model)

    prepare = Prepare(model)
    with_shared = WithShared(prepare)

    def site_update(params, shared, stats, count, size):
        return model.site_update(params, shared, stats, size, damping(count) if callable(damping) else damping)

    def ascend(params, opt_state, shared, pullback, data_value, data_grad, scale, size, structure):
        value, grad = minibatch_energy(model, size, params, shared, pullback, data_value, data_grad, scale,
                                       structure)
        params, opt_state, ok = ascent_update(optimizer, params, opt_state, value, grad)
        return params, opt_state, ok, value

    site_update, ascend = jax.jit(site_update), jax.jit(ascend, static_argnames="structure")
    optimizer_init = jax.jit(optimizer.init)  # one program, not one per array operation of the optimiser's state

    def init(params) -> StepState:
        with float64():
            params = strongly_typed(params)
            return StepState(params, optimizer_init(params), on_device(np.int32(0)))

    def update(state: StepState, batch: Minibatch) -> tuple[StepState, StepInfo]:
        with float64():
            params = state.params
            size = on_device(np.float64(batch.data_size))
            shared, pullback = derived(prepare, (params, size))
            structure = jax.tree_util.tree_structure(shared)
            sites_ok = on_device(np.bool_(True))
            if sites:
                first = (batch.submit(Derived(site_term, WithShared(prepare, pullback=True)), (params, size), keep=True)
                         if rows else batch.submit(Derived(site_term, with_shared), (params, size)))
                params, shared, sites_ok = site_update(params, shared, first.sum(), state.count, size)
                value, grad = (batch.submit(data_term, model.held(shared), kept=first) if rows
                               else batch.submit(data_term, (params, shared))).sum()
                first.release()  # the kept rows, where they were computed
            else:
                value, grad = batch.submit(Derived(data_term, with_shared), (params, size)).sum()
            params, opt_state, ok, energy = ascend(params, state.opt_state, shared, pullback, value, grad,
                                                   batch.scale, size, structure)
            return StepState(params, opt_state, state.count + 1), StepInfo(energy, ok, sites_ok)

    return TrainStep(init, update, StepParts(compiled_program(prepare), site_update, ascend, data_term, site_term))


class TrainStep(NamedTuple):
    """``init(params) -> StepState``, ``update(state, batch) -> (StepState, StepInfo)`` and ``release()``, which
    lets go what the step holds where blocks are computed between updates (a step over rows: nothing, it releases
    its kept pass within the update; the class-parallel step: its class groups)."""

    init: Callable[[Any], StepState]
    update: Callable[[StepState, Minibatch], tuple[StepState, StepInfo]]
    parts: StepParts
    release: Callable[[], None] = lambda: None


@contextlib.contextmanager
def released(current: Callable[[], TrainStep]) -> Iterator[None]:
    """Around a segment of training: afterwards what the step ``current()`` holds is released (the trainer's
    at the end: a resumed run may have built another), raised or not; a later segment's step places it again
    from the arrays the loop's state holds."""
    try:
        yield
    finally:
        current().release()
