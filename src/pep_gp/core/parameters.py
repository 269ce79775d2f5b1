"""Constrained parameters are stored unconstrained; this is the one place the bijections live.

A kernel's hyper-parameters are typed: each is a :class:`Positive`, stored as its logarithm (the one
bijection of the type, applied only by :attr:`Positive.value` and :meth:`Positive.of`), so that a
lengthscale or a variance means the same stored number in every model.

Each parameter pytree (a NamedTuple) declares its table ``BIJECTIONS = {field: (name, bijection)}``
once; :func:`constrained` and :func:`unconstrained` are the only places a model moves between the
stored values and the ones the mathematics uses (GPJax's ``DEFAULT_BIJECTION``, STYLE principle 7).

Softplus (gradients stay bounded for large values) is kept by the collapsed regression and the tied
EP/QP classifier. The power-EP sparse GP and the deep GP store logarithms (an Adam step is a relative
change: a classifier's amplitude can grow from 1 to ~50 within a fit); the multi-class model does so
as Villacampa-Calvo & Hernández-Lobato's (2017) reference code does ("ADAM ascent step on log σ, log σ₀,
log l", with l the *squared* lengthscale), so Adam's default step is the same relative change as there:
on Fashion-MNIST this alone moves pep onto the R code's accuracy trajectory (docs/results/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def positive(raw):
    """Map an unconstrained value to a positive one (softplus)."""
    return jax.nn.softplus(raw)


def unconstrain_positive(value):
    """Inverse of :func:`positive`: ``log(expm1(value))`` computed stably."""
    value = jnp.asarray(value)
    return value + jnp.log(-jnp.expm1(-value))


def positive_from_log(raw):
    """Map a logarithm to its positive value (``exp``)."""
    return jnp.exp(raw)


def log_of_positive(value):
    """Inverse of :func:`positive_from_log`."""
    return jnp.log(jnp.asarray(value))


class Bijection(NamedTuple):
    """``forward``: stored (unconstrained) → constrained value; ``inverse``: back."""

    forward: Callable[[Any], Any]
    inverse: Callable[[Any], Any]


SOFTPLUS = Bijection(positive, unconstrain_positive)
LOG = Bijection(positive_from_log, log_of_positive)
LOG_OF_SQUARE = Bijection(lambda raw: jnp.exp(0.5 * raw), lambda value: jnp.log(jnp.asarray(value) ** 2))
"""A positive ``ℓ`` stored as ``log ℓ²`` (Villacampa-Calvo & Hernández-Lobato's (2017) reference code's lengthscale parameter)."""


def constrained(params: NamedTuple) -> dict[str, Any]:
    """The constrained values of ``params`` by name, from its class's ``BIJECTIONS`` table."""
    return {name: bijection.forward(getattr(params, field))
            for field, (name, bijection) in type(params).BIJECTIONS.items()}


def unconstrained(cls: type, **values: Any) -> dict[str, Any]:
    """The stored fields of ``cls`` for constrained ``values`` given by name (its ``BIJECTIONS``)."""
    return {field: bijection.inverse(values[name]) for field, (name, bijection) in cls.BIJECTIONS.items()}


@jax.tree_util.register_pytree_with_keys_class
class Positive:
    """A positive hyper-parameter: its logarithm ``raw`` is the stored (optimised) leaf, :attr:`value` its
    constrained value (:data:`LOG`, the one bijection of the type: an Adam step is a relative change).
    ``fixed`` (static) marks a value the optimiser must not move.

    Example:
        >>> p = Positive.of(2.0)
        >>> float(p.value)
        2.0
    """

    __slots__ = ("raw", "fixed")

    def __init__(self, raw, fixed: bool = False):
        self.raw = raw
        self.fixed = bool(fixed)

    @classmethod
    def of(cls, value, fixed: bool = False) -> "Positive":
        """The parameter of constrained ``value`` (ValueError unless every entry is positive and finite)."""
        array = np.asarray(value, dtype=float)
        if not np.all(np.isfinite(array) & (array > 0)):
            raise ValueError(f"a positive hyper-parameter must be positive and finite; got {value!r}")
        return cls(LOG.inverse(array), fixed)

    @property
    def value(self):
        """The constrained value."""
        return LOG.forward(self.raw)

    def tree_flatten_with_keys(self):
        return ((jax.tree_util.GetAttrKey("raw"), self.raw),), self.fixed

    @classmethod
    def tree_unflatten(cls, fixed, children):
        return cls(children[0], fixed)

    def __repr__(self):
        return f"Positive({self.value!r}{', fixed' if self.fixed else ''})"


def fixed_leaves(tree: Any) -> Any:
    """A pytree like ``tree`` of bools: True for the leaves of a :class:`Positive` marked ``fixed``."""
    def mark(node):
        return Positive(node.fixed, node.fixed) if isinstance(node, Positive) else False
    return jax.tree_util.tree_map(mark, tree, is_leaf=lambda node: isinstance(node, Positive))
