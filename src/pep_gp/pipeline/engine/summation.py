"""The fixed summation tree of the engine, cut into subtrees that workers sum on their own, and the
results that need not travel because they are zero by construction.

Sums over a step's blocks follow one balanced binary tree over the block order (:func:`tree_sum`), so
their rounding never depends on which process computed what. A cluster of W workers computes whole
subtrees of that tree (:func:`subtrees`): each worker adds its own blocks' results in the tree's order
and sends one partial sum, and the coordinator adds the partial sums where the tree joins them
(:func:`join_subtrees`). Every addition is the one :func:`tree_sum` would make, so the result is
bit-for-bit the same for any number of workers, in-process included.

A block function's results that are zero by construction — the gradient of what it never differentiates,
e.g. a held cavity or the tied factor that moves by EP — are known from its traced program
(:func:`structural_zeros`); they travel as a :class:`Zero` (shape and dtype only) and become zero arrays
on the coordinator (:func:`inflate`), which is what adding zero arrays would have given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.extend.core import Literal

PASS_THROUGH = frozenset({"broadcast_in_dim", "convert_element_type", "reshape", "copy", "copy_p"})
"""Primitives that keep a zero a zero (the forms JAX's autodiff gives an unused input's cotangent)."""
SUMS = frozenset({"add", "add_any"})
"""Primitives whose result is ``+0`` when every operand is (``+0 + +0``: a cotangent summed over two paths)."""


class Zero(NamedTuple):
    """A result leaf that is zero by construction: only its shape and dtype travel."""

    shape: tuple[int, ...]
    dtype: str


def add(a: Any, b: Any) -> Any:
    """``a + b`` for result leaves, :class:`Zero` included (zero plus zero is zero)."""
    if isinstance(a, Zero) and isinstance(b, Zero):
        return a
    return np.add(inflate_leaf(a), inflate_leaf(b))


def tree_sum(parts: Sequence[Any], plus: Callable[[Any, Any], Any] = add) -> Any:
    """Sum of pytrees in a fixed, balanced binary tree over their order (deterministic rounding): the
    first ``len // 2`` parts, then the rest, recursively."""
    if not parts:
        raise ValueError("tree_sum of no parts")
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return jax.tree_util.tree_map(plus, tree_sum(parts[:middle], plus), tree_sum(parts[middle:], plus),
                                  is_leaf=_is_zero)


def subtrees(count: int, pieces: int) -> list[range]:
    """``range(count)`` cut into at most ``pieces`` consecutive ranges, each a whole subtree of
    :func:`tree_sum`'s tree over ``count`` parts (the pieces shared in proportion to the parts)."""

    def split(span: range, share: int) -> list[range]:
        if share <= 1 or len(span) <= 1:
            return [span]
        middle = span.start + len(span) // 2
        left = min(share - 1, max(1, round(share * (middle - span.start) / len(span))))
        return split(range(span.start, middle), left) + split(range(middle, span.stop), share - left)

    return split(range(count), pieces)


def join_subtrees(count: int, partial: dict[range, Any], plus: Callable[[Any, Any], Any] = add) -> Any:
    """:func:`tree_sum` of ``count`` parts from the sums of whole subtrees (``partial``, keyed by the
    ranges of :func:`subtrees`)."""

    def node(span: range) -> Any:
        if span in partial:
            return partial[span]
        middle = span.start + len(span) // 2
        return jax.tree_util.tree_map(plus, node(range(span.start, middle)), node(range(middle, span.stop)),
                                      is_leaf=_is_zero)

    return node(range(count))


def _is_zero(leaf: Any) -> bool:
    return isinstance(leaf, Zero)


def inflate_leaf(leaf: Any) -> Any:
    """A :class:`Zero` as a zero array; anything else as it is."""
    return np.zeros(leaf.shape, leaf.dtype) if isinstance(leaf, Zero) else leaf


def inflate(tree: Any) -> Any:
    """``tree`` with every :class:`Zero` a zero array."""
    return jax.tree_util.tree_map(inflate_leaf, tree, is_leaf=_is_zero)


def payload_bytes(tree: Any) -> int:
    """Bytes of the arrays of ``tree`` that travel (a :class:`Zero` travels as its shape only)."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=_is_zero)
    return sum(int(np.asarray(leaf).nbytes) for leaf in leaves if not _is_zero(leaf))


def structural_zeros(closed_jaxpr: Any) -> list[bool]:
    """For each output of a traced program: True when it is ``+0`` by construction (a literal zero,
    broadcast or converted), whatever the inputs."""
    producers = {var: eqn for eqn in closed_jaxpr.jaxpr.eqns for var in eqn.outvars}

    def zero(var: Any) -> bool:
        if isinstance(var, Literal):
            value = np.asarray(var.val)
            return bool(np.all(value == 0) and not np.any(np.signbit(value)))
        eqn = producers.get(var)
        if eqn is None:
            return False
        if eqn.primitive.name in SUMS:
            return all(map(zero, eqn.invars))
        return eqn.primitive.name in PASS_THROUGH and zero(eqn.invars[0])

    return [zero(var) for var in closed_jaxpr.jaxpr.outvars]


def without_zeros(tree: Any, zeros: list[bool]) -> Any:
    """``tree`` with the leaves flagged by ``zeros`` (:func:`structural_zeros`) replaced by :class:`Zero`."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return jax.tree_util.tree_unflatten(treedef, [Zero(tuple(leaf.shape), str(leaf.dtype)) if is_zero else leaf
                                                  for leaf, is_zero in zip(leaves, zeros, strict=True)])
