"""Gradient ascent on an energy with any optax transformation; non-finite steps are rejected.

The update rule is shared by the in-process estimators and the distributed coordinator: a step whose
energy or gradient is not finite leaves parameters and optimiser state unchanged and is counted, so
numerical trouble is reported rather than silently turning parameters into NaN (DESIGN §8).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax


class AscentResult(NamedTuple):
    params: object
    values: jnp.ndarray  # energy before each step, shape [num_steps]
    rejected: jnp.ndarray  # number of rejected (non-finite) steps, shape []


def adam(learning_rate: float, frozen: Callable[[object], object] | None = None) -> optax.GradientTransformation:
    """optax Adam (default moments, as the papers use) with optionally frozen leaves.

    Args:
        learning_rate: step size.
        frozen: maps the params pytree to a same-structure pytree of bools, True for leaves to keep fixed.
    """
    base = optax.adam(learning_rate)
    if frozen is None:
        return base
    labels = lambda params: jax.tree_util.tree_map(lambda f: "frozen" if f else "train", frozen(params))
    return optax.multi_transform({"train": base, "frozen": optax.set_to_zero()}, labels)


def all_finite(tree) -> jnp.ndarray:
    """True when every leaf of ``tree`` is finite."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def ascent_update(optimizer: optax.GradientTransformation, params, opt_state, value, grad):
    """One guarded ascent step on ``value`` with gradient ``grad``: ``(params, opt_state, accepted)``."""
    ok = jnp.isfinite(value) & all_finite(grad)
    safe_grad = jax.tree_util.tree_map(lambda g: jnp.where(ok, -g, 0.0), grad)
    updates, new_state = optimizer.update(safe_grad, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    keep = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)
    return keep(new_params, params), keep(new_state, opt_state), ok


def maximise(energy: Callable, params, optimizer: optax.GradientTransformation, num_steps: int) -> AscentResult:
    """Maximise ``energy(params)`` for ``num_steps`` full-batch steps, compiled as one ``lax.scan``."""
    if num_steps == 0:
        return AscentResult(params, jnp.zeros(0), jnp.asarray(0))
    value_and_grad = jax.value_and_grad(energy)

    def step(carry, _):
        params, opt_state, rejected = carry
        value, grad = value_and_grad(params)
        params, opt_state, ok = ascent_update(optimizer, params, opt_state, value, grad)
        return (params, opt_state, rejected + (~ok).astype(jnp.int32)), value

    carry = (params, optimizer.init(params), jnp.asarray(0, jnp.int32))
    (params, _, rejected), values = jax.jit(lambda c: jax.lax.scan(step, c, None, length=num_steps))(carry)
    return AscentResult(params, values, rejected)
