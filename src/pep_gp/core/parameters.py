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


def array_module(value):
    """:mod:`numpy` for a value on the host (a start or a user's setting), :mod:`jax.numpy` for a jax array or a
    tracer: run eagerly, every jax operation is a program of its own to compile in each new process (the
    inverses below ran eight at a fit's start, 0.2 s), which numpy's arithmetic on a few numbers is not."""
    return jnp if isinstance(value, jax.Array) else np


def on_device(value, dtype=None):
    """``jnp.asarray(value, dtype)``, a host value (numpy, Python numbers) by a transfer alone: ``jnp.asarray`` of
    one compiles a program (JAX's ``stage`` or ``convert_element_type``) for each new shape in every new process.
    Its dtype is canonical, as ``jnp.asarray``'s (float64 only under x64), and a Python number stays weakly typed
    as there (combined with a float32 array, it computes in float32)."""
    if isinstance(value, jax.Array):
        return value if dtype is None else jnp.asarray(value, dtype)
    if dtype is None and isinstance(value, (bool, int, float, complex)):
        return jax.device_put(value)
    return jax.device_put(np.asarray(value, dtype))


def unconstrain_positive(value):
    """Inverse of :func:`positive`: ``log(expm1(value))`` computed stably (numpy for a host value)."""
    xp = array_module(value)
    value = xp.asarray(value, dtype=float) if xp is np else value
    return value + xp.log(-xp.expm1(-value))


def positive_from_log(raw):
    """Map a logarithm to its positive value (``exp``)."""
    return jnp.exp(raw)


def log_of_positive(value):
    """Inverse of :func:`positive_from_log` (numpy for a host value)."""
    xp = array_module(value)
    return xp.log(xp.asarray(value, dtype=float) if xp is np else value)


class Bijection(NamedTuple):
    """``forward``: stored (unconstrained) → constrained value; ``inverse``: back."""

    forward: Callable[[Any], Any]
    inverse: Callable[[Any], Any]


SOFTPLUS = Bijection(positive, unconstrain_positive)
LOG = Bijection(positive_from_log, log_of_positive)


def constrained(params: NamedTuple) -> dict[str, Any]:
    """The constrained values of ``params`` by name, from its class's ``BIJECTIONS`` table."""
    return {name: bijection.forward(getattr(params, field))
            for field, (name, bijection) in type(params).BIJECTIONS.items()}


def unconstrained(cls: type, **values: Any) -> dict[str, Any]:
    """The stored fields of ``cls`` for constrained ``values`` given by name (its ``BIJECTIONS``), jax arrays (host
    values mapped by numpy, :func:`on_device`)."""
    return {field: on_device(bijection.inverse(values[name])) for field, (name, bijection) in cls.BIJECTIONS.items()}


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
