"""Mean functions: small immutable pytrees ``m(x)`` of the GP prior ``f ~ GP(m, k)``, trained with the kernel.

A mean function maps rows ``x`` ``[B, D]`` to ``m(x)`` ``[B]`` (:meth:`MeanFunction.__call__`); its parameters
are real-valued arrays (no constraint, no bijection), the children of its pytree, so the optimiser moves them
with the other hyper-parameters. The models see the latent function ``f = m(x) + g(x)`` with ``g ~ GP(0, k)``:
the data terms take ``m(x) + g(x)`` (a Gaussian likelihood's targets less ``m(x)``), the predictive mean is
shifted by ``m(x*)`` and the variances are those of ``g`` (Rasmussen & Williams 2006, §2.7, eq. 2.38 with
fixed ``m``; GPflow's ``mean_functions``, GPyTorch's ``means``).

Mean functions:

* :class:`Zero` ``0``, the default: every model adds exactly nothing (:meth:`Zero.plus` returns its values);
* :class:`Constant` ``c``;
* :class:`Linear` ``wᵀx + b`` (GPflow's ``Linear``, one output);
* a user's own: a subclass of :class:`MeanFunction` naming its ``parameters`` and implementing ``__call__``,
  registered under a name with :func:`register_mean` (which also makes it a pytree, and what a saved run
  names it by: the class must be registered again, its module imported, before the run is loaded).

A model of several latent functions (the multi-class models, one per class) gives each its own copy of the mean:
:meth:`MeanFunction.stacked` puts a leading axis of one entry per latent function on every parameter and
:meth:`MeanFunction.each` evaluates them all, ``[B, G]``.

The models train in standardised units (inputs less their mean over their deviation; regression targets
likewise, :mod:`pep_gp.pipeline.data.blocks`), and a mean function acts there: ``Constant(0.0)`` starts at
the training targets' mean, and ``Linear``'s weights are per standardised input. :meth:`MeanFunction.in_data_units`
gives the same function in the data's own units (docs/how-to/mean-functions.md).

Example:
    >>> import jax.numpy as jnp
    >>> m = Linear(weights=[2.0], bias=1.0).build(1)
    >>> m(jnp.array([[0.0], [1.0]])).tolist()
    [1.0, 3.0]
    >>> m.in_data_units(x_mean=[10.0], x_std=[2.0], shift=5.0, scale=3.0)
    Linear(weights=[3], bias=-22)
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from . import float64
from .parameters import on_device

MEANS: dict[str, type] = {}
"""The mean-function classes by name (``"constant"``, ``"linear"``, a user's): what ``mean_function`` names."""


def register_mean(name: str):
    """Register a mean-function class as a pytree (its :attr:`~MeanFunction.parameters` the children, its
    ``statics`` the static part) and under ``name`` in :data:`MEANS`.

    Example:
        >>> @register_mean("doc-quadratic")
        ... class Quadratic(MeanFunction):
        ...     parameters = ("a", "b")
        ...     def __call__(self, x):
        ...         return self.a * x[:, 0] ** 2 + self.b
        >>> Quadratic(a=2.0)(jnp.array([[3.0]])).tolist()
        [18.0]
    """

    def register(cls):
        cls.name = name
        MEANS[name] = cls

        def flatten(mean):
            children = tuple((jax.tree_util.GetAttrKey(p), getattr(mean, p)) for p in cls.parameters)
            return children, tuple(getattr(mean, s) for s in cls.statics)

        def unflatten(statics, children):
            mean = object.__new__(cls)
            for field, value in zip(cls.parameters + cls.statics, tuple(children) + tuple(statics)):
                object.__setattr__(mean, field, value)
            return mean

        jax.tree_util.register_pytree_with_keys(cls, flatten, unflatten)
        return cls

    return register


class MeanFunction:
    """The base of every mean function: ``m(x)`` on rows ``[B, D] -> [B]``.

    A subclass sets ``parameters`` (the names of its real-valued fields, each a number or an array) and
    implements ``__call__``; the base's constructor takes the parameters by position or name, a value left
    out is 0 (:meth:`build` gives an array of ``None`` its shape, as :class:`Linear` does for its weights).
    """

    name: ClassVar[str]
    parameters: ClassVar[tuple[str, ...]] = ()
    statics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args, **values):
        if len(args) > len(self.parameters):
            raise ValueError(f"{type(self).__name__} takes {len(self.parameters)} parameters "
                             f"{list(self.parameters)}; got {len(args)} values")
        values = {**dict(zip(self.parameters, args)), **values}
        unknown = sorted(set(values) - set(self.parameters))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown parameters {unknown}; it has {list(self.parameters)}")
        for field in self.parameters:
            object.__setattr__(self, field, _real(type(self).__name__, field, values.get(field, self.default(field))))

    def default(self, field: str):
        """The value of a parameter left out: 0."""
        return 0.0

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use replace(...)")

    def __call__(self, x):
        """``m(x)`` ``[B]`` for rows ``x`` ``[B, D]``."""
        raise NotImplementedError

    def plus(self, x, values):
        """``values + m(x)`` (``values`` ``[B]``): a latent mean with the prior's mean added."""
        return values + self(x)

    def minus(self, x, values):
        """``values − m(x)`` (``values`` ``[B]``): targets about the prior's mean."""
        return values - self(x)

    def build(self, dims: int) -> "MeanFunction":
        """This mean for inputs of ``dims`` columns, every parameter an array of JAX's float (float64 in pep's
        scope; ValueError naming a parameter of the wrong shape, :meth:`shapes`)."""
        values = {}
        for field, shape in self.shapes(dims).items():
            value = getattr(self, field)
            value = on_device(np.zeros(shape) if value is None else value, float)
            if shape is not None and value.shape != shape:
                raise ValueError(f"mean function {self.name!r}: {field} needs shape {shape} for {dims} input columns; "
                                 f"got {value.shape}")
            values[field] = value
        return self.replace(**values)

    def shapes(self, dims: int) -> dict[str, tuple[int, ...] | None]:
        """The shape each parameter must have for ``dims`` input columns (None: any)."""
        return {field: None for field in self.parameters}

    def stacked(self, count: int, dims: int) -> "MeanFunction":
        """This mean for ``count`` latent functions of inputs of ``dims`` columns (a multi-class model's, one per
        class), each with parameters of its own: every parameter ``[count, *shape]`` (:meth:`shapes`), a value of
        one function's shape starting every function there and one of ``[count, *shape]`` giving each its own
        (``Constant([c_1, …, c_C])``); a parameter of any shape (None) is one function's. :meth:`each` evaluates
        it. ValueError naming a parameter of another shape."""
        values = {}
        for field, shape in self.shapes(dims).items():
            value = getattr(self, field)
            value = jnp.zeros(shape, dtype=float) if value is None else jnp.asarray(value, dtype=float)
            if shape is not None and value.shape not in (shape, (count, *shape)):
                raise ValueError(f"mean function {self.name!r}: {field} needs shape {shape} (one value for every latent "
                                 f"function) or {(count, *shape)} (one for each of {count}) for {dims} input "
                                 f"columns; got {value.shape}")
            own = shape is not None and value.shape == (count, *shape)
            values[field] = value if own else jnp.broadcast_to(value, (count, *value.shape))
        return self.replace(**values)

    def each(self, x):
        """``m_g(x)`` of every latent function of a :meth:`stacked` mean, ``[B, G]`` for rows ``x`` ``[B, D]`` (each
        function's parameters are its slice of the leading axis)."""
        return jax.vmap(lambda mean: mean(x), out_axes=1)(self)

    def plus_each(self, x, values):
        """``values + m_g(x)`` (``values`` ``[B, G]``) for a :meth:`stacked` mean: the latent functions' means."""
        return values + self.each(x)

    def in_data_units(self, x_mean, x_std, shift: float = 0.0, scale: float = 1.0) -> "MeanFunction":
        """This mean (of inputs standardised as ``(x − x_mean)/x_std``, in latent units ``(f − shift)/scale``)
        as a function of the data's own inputs in the targets' units: ``shift + scale·m((x − x_mean)/x_std)``;
        in closed form for :class:`Zero`, :class:`Constant` and :class:`Linear`, else :class:`InDataUnits`."""
        return InDataUnits(self, tuple(map(float, np.ravel(x_mean))), tuple(map(float, np.ravel(x_std))),
                           *(float(v) if np.ndim(v) == 0 else tuple(map(float, v)) for v in (shift, scale)))

    def replace(self, **values) -> "MeanFunction":
        """A copy with some fields replaced."""
        mean = object.__new__(type(self))
        for field in self.parameters + self.statics:
            object.__setattr__(mean, field, values.get(field, getattr(self, field)))
        return mean

    def to_dict(self) -> dict[str, Any]:
        """The JSON description :func:`from_dict` rebuilds this mean from: its name and its values."""
        out: dict[str, Any] = {"name": self.name}
        for field in self.parameters:
            value = getattr(self, field)
            if value is not None:
                value = np.asarray(jax.device_get(value), dtype=float)
                out[field] = value.tolist() if value.ndim else float(value)
        return out

    def __repr__(self):
        parts = [f"{field}={_short(value)}" for field, value in self.to_dict().items() if field != "name"]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(repr(self.to_dict()))


def _short(value) -> str:
    """A parameter's value to 4 significant digits, nested as its array is (a multi-output ``Linear``'s
    ``[P, D]`` weights print as ``P`` rows)."""
    if isinstance(value, list):
        return f"[{', '.join(_short(entry) for entry in value)}]"
    return f"{value:.4g}"


def _real(owner: str, field: str, value):
    """A parameter's value: None (a shape left to :meth:`MeanFunction.build`), or finite numbers."""
    if value is None:
        return None
    array = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{owner}: {field} must be finite; got {value!r}")
    return array if array.ndim else float(array)


@register_mean("zero")
class Zero(MeanFunction):
    """``m(x) = 0``, every model's default: :meth:`plus` and :meth:`minus` return their values unchanged, so a
    model with it computes what it computes without one, bit for bit."""

    def __call__(self, x):
        return jnp.zeros(x.shape[0], x.dtype)

    def plus(self, x, values):
        return values

    def minus(self, x, values):
        return values

    def plus_each(self, x, values):
        return values

    def each(self, x):
        """No latent function's mean: None (:meth:`plus_each` adds nothing, so a model that adds it only when
        there is one computes what it computes without one, bit for bit)."""
        return None

    def in_data_units(self, x_mean, x_std, shift=0.0, scale: float = 1.0) -> MeanFunction:
        """``Constant(shift)``: a number, or one per output ``[P]`` (a multi-output regressor's); Zero for 0."""
        return Zero() if np.all(np.equal(shift, 0.0)) else Constant(shift)


@register_mean("constant")
class Constant(MeanFunction):
    """``m(x) = c`` (GPflow's ``Constant``, GPyTorch's ``ConstantMean``). A model trains a number ``c``; a
    multi-output regressor's fitted mean holds one per output, ``c`` ``[P]``, and gives ``[B, P]`` (GPflow's
    ``Constant`` of a vector ``c``)."""

    parameters = ("constant",)

    def __call__(self, x):
        return jnp.broadcast_to(self.constant, x.shape[:1] + np.shape(self.constant)).astype(x.dtype)

    def shapes(self, dims):
        return {"constant": ()}

    def in_data_units(self, x_mean, x_std, shift: float = 0.0, scale: float = 1.0) -> MeanFunction:
        return Constant(shift + scale * np.asarray(self.constant, dtype=float))


@register_mean("linear")
class Linear(MeanFunction):
    """``m(x) = wᵀx + b`` (GPflow's ``Linear``, GPyTorch's ``LinearMean``): ``weights`` ``[D]`` (zeros when left
    out), ``bias`` a number. A multi-class model's fitted mean holds one row of weights and one bias per class,
    ``weights`` ``[C, D]`` and ``bias`` ``[C]``, and gives ``[B, C]`` (GPflow's ``Linear`` of a matrix)."""

    parameters = ("weights", "bias")

    def default(self, field):
        return None if field == "weights" else 0.0

    def __call__(self, x):
        return x @ self.weights.T + self.bias

    def shapes(self, dims):
        return {"weights": (dims,), "bias": ()}

    def in_data_units(self, x_mean, x_std, shift=0.0, scale=1.0) -> MeanFunction:
        """In closed form; ``shift`` and ``scale`` a number, or one per latent function of a stacked mean (a
        multi-output regressor's ``[P]``, each row of ``weights`` scaled by its own)."""
        weights = np.asarray(self.weights, dtype=float) / np.asarray(x_std, dtype=float)
        bias = shift + scale * (np.asarray(self.bias, dtype=float) - weights @ np.asarray(x_mean, dtype=float))
        return Linear(weights=np.asarray(scale, dtype=float)[..., None] * weights, bias=bias)


class InDataUnits:
    """A mean of standardised units read in the data's: ``shift + scale·mean((x − x_mean)/x_std)`` on rows ``x``
    ``[B, D]`` of the data's own inputs (what :meth:`MeanFunction.in_data_units` gives for a mean without a
    closed form; ``mean`` is the fitted mean itself)."""

    def __init__(self, mean: MeanFunction, x_mean: tuple[float, ...], x_std: tuple[float, ...],
                 shift: float | tuple[float, ...], scale: float | tuple[float, ...], each: bool = False):
        self.mean, self.x_mean, self.x_std, self.shift, self.scale = mean, x_mean, x_std, shift, scale
        self.each = each  # ``mean`` is :meth:`~MeanFunction.stacked`: one function per latent, [B, G]

    def for_each_latent(self) -> "InDataUnits":
        """The same reading of a :meth:`~MeanFunction.stacked` mean (a multi-class model's): ``[B, G]``."""
        return InDataUnits(self.mean, self.x_mean, self.x_std, self.shift, self.scale, each=True)

    def __call__(self, x) -> np.ndarray:
        """The mean at rows ``x`` of the data's inputs, ``[B]`` (``[B, G]`` for each latent) float64 (evaluated in
        JAX's float64 scope)."""
        with float64():
            x = (jnp.asarray(x, dtype=float) - jnp.asarray(self.x_mean)) / jnp.asarray(self.x_std)
            values = self.mean.each(x) if self.each else self.mean(x)
            return np.asarray(jnp.asarray(self.shift) + jnp.asarray(self.scale) * values)

    def __repr__(self):
        shift, scale = (np.array2string(np.asarray(v), precision=4) for v in (self.shift, self.scale))
        return f"{shift} + {scale}·{self.mean!r} of the standardised inputs"


def from_dict(description) -> MeanFunction:
    """The mean function of a :meth:`MeanFunction.to_dict` description, of a registered name (``"linear"``), or
    the object itself (ValueError naming an unknown mean or field)."""
    from difflib import get_close_matches

    if isinstance(description, MeanFunction):
        return description
    if isinstance(description, str):
        description = {"name": description}
    if not isinstance(description, dict) or "name" not in description:
        raise ValueError(f"a mean function is a name, a table with a 'name' or a pep_gp.means object; "
                         f"got {description!r}")
    values = dict(description)
    name = str(values.pop("name")).strip().lower()
    if name not in MEANS:
        close = get_close_matches(name, MEANS, n=1)
        raise ValueError(f"unknown mean function {name!r}; expected one of {', '.join(MEANS)}"
                         + (f" (did you mean {close[0]!r}?)" if close else "")
                         + " (a user's own must be registered with pep_gp.means.register_mean before use)")
    return MEANS[name](**values)
