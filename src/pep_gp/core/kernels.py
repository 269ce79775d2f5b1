"""Covariance functions: small immutable pytrees over a bank of ``G`` latent GPs, composed with ``+`` and ``*``.

Every kernel evaluates ``G`` covariance functions at once, as the models' banks need them
(:mod:`pep_gp.core.bank`): :meth:`Kernel.gram` of inducing inputs ``z`` ``[G, M, D] -> [G, M, M]``,
:meth:`Kernel.cross` of inducing inputs and rows shared by all GPs ``([G, M, D], [B, D]) -> [G, M, B]``,
and :meth:`Kernel.diag` ``[B, D] -> [G, B]``. Its hyper-parameters are :class:`~pep_gp.core.parameters.Positive`
leaves with a leading axis of ``G`` (one value per GP; :meth:`Kernel.bank` broadcasts the values a user
gives), stored as logarithms; ``active_dims`` (static) restricts a kernel to some of the input columns, and
``prior`` (static) puts a prior on some of its parameters (:mod:`pep_gp.core.priors`; :meth:`Kernel.log_prior`).

Kernels (Rasmussen & Williams 2006, §4.2, with ``r² = Σ_d (x_d − x'_d)²/ℓ_d²``):

* :class:`SquaredExponential` ``σ² exp(−r²/2)`` (eq. 4.9, ARD form eq. 5.1);
* :class:`Matern12`, :class:`Matern32`, :class:`Matern52` ``σ² exp(−r)``, ``σ²(1 + √3r)exp(−√3r)``,
  ``σ²(1 + √5r + 5r²/3)exp(−√5r)`` (eqs. 4.14, 4.17);
* :class:`RationalQuadratic` ``σ²(1 + r²/(2a))^(−a)`` (eq. 4.19);
* :class:`Periodic` ``σ² exp(−2 Σ_d sin²(π(x_d − x'_d)/p)/ℓ_d²)`` (MacKay 1998; R&W eq. 4.31);
* :class:`Linear` ``σ² xᵀx'`` (R&W eq. 4.22, no offset: add a :class:`Constant` for one);
* :class:`Constant` ``σ²``;
* :class:`Sum` (``k1 + k2``) and :class:`Product` (``k1 * k2``), elementwise.

The stationary kernels that are functions of ``r²`` (SE, Matérn, RQ) share one evaluation of the scaled squared
distances (:class:`Stationary`), written as matrix products about a centre inside the inducing inputs, which
can run in float32 for large D (``products``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from .parameters import LOG, Positive, array_module, on_device
from .priors import log_density, prior_from_dict, prior_to_dict


ProductDtype = Literal["float64", "float32"]
"""The dtypes a stationary kernel can run its products over the inputs in."""
PRODUCT_DTYPES = get_args(ProductDtype)


def check_product_dtype(value: str, name: str = "products") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of :data:`PRODUCT_DTYPES`."""
    if value not in PRODUCT_DTYPES:
        raise ValueError(f"{name} must be one of {PRODUCT_DTYPES}; got {value!r}")


def _centre(points):
    """The mean of the rows of ``points`` ([..., D]), a constant for autodiff: shape [D].

    Squared distances are translation invariant, but their expansion ``‖x‖² + ‖z‖² − 2x·z`` cancels
    catastrophically when the inputs share a large offset ``o`` (round-off ``~ε‖o‖²/ℓ²``: at ``o = 1e6``
    the kernel was off by 2.6e-4, at 1e8 it was meaningless). Expanding about a point inside the
    inputs costs ``O(N·D)`` and leaves round-off ``~ε·spread²/ℓ²``. The centre carries no gradient: the
    exact distances do not depend on it, so the derivative with it held fixed is the exact one. Callers
    take it from the inducing inputs only, so it (and the rounding) does not depend on how the data rows
    are chunked.
    """
    return jax.lax.stop_gradient(jnp.mean(points.reshape(-1, points.shape[-1]), axis=0))


@jax.custom_vjp
def _symmetric_gram(a):
    """``a aᵀ`` per leading index, ``[C, M, D] -> [C, M, M]``; its backward pass is one matrix product
    ``(G + Gᵀ) a`` instead of autodiff's two."""
    return jnp.einsum("cmd,cnd->cmn", a, a)


def _symmetric_gram_forward(a):
    return _symmetric_gram(a), a


def _symmetric_gram_backward(a, cotangent):
    return (jnp.einsum("cmn,cnd->cmd", cotangent + jnp.swapaxes(cotangent, 1, 2), a),)


_symmetric_gram.defvjp(_symmetric_gram_forward, _symmetric_gram_backward)


def _safe_sqrt(sq):
    """``√sq`` with a zero (not infinite) derivative at ``sq = 0`` (the diagonal of a Gram matrix)."""
    positive = sq > 0.0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


KERNELS: dict[str, type] = {}
"""The kernel classes by name (``"matern52"``, …): what ``[model.kernel]`` and ``pep train --set`` name."""


def register_kernel(name: str):
    """Register a kernel class as a pytree (its :attr:`~Kernel.parameters` the children, the rest static) and
    under ``name`` in :data:`KERNELS`."""

    def register(cls):
        cls.name = name
        KERNELS[name] = cls

        def flatten(kernel):
            children = tuple((jax.tree_util.GetAttrKey(p), getattr(kernel, p)) for p in cls.parameters)
            return children, tuple(getattr(kernel, s) for s in cls.statics)

        def unflatten(statics, children):
            kernel = object.__new__(cls)
            for field, value in zip(cls.parameters + cls.statics, tuple(children) + tuple(statics)):
                object.__setattr__(kernel, field, value)
            return kernel

        jax.tree_util.register_pytree_with_keys(cls, flatten, unflatten)
        return cls

    return register


class Kernel:
    """The base of every kernel: the operators, ``active_dims``, and the bank's evaluation methods.

    A leaf kernel sets ``parameters`` (names of its :class:`~pep_gp.core.parameters.Positive` fields) and
    ``statics`` and implements ``_gram``, ``_cross`` and ``_diag`` on its active columns.
    """

    name: ClassVar[str]
    parameters: ClassVar[tuple[str, ...]] = ()
    statics: ClassVar[tuple[str, ...]] = ("active_dims", "prior")
    stationary: ClassVar[bool] = False
    active_dims: tuple[int, ...] | None = None
    prior: tuple[tuple[str, Any], ...] = ()  # (parameter, prior) pairs (pep_gp.core.priors), in parameter order

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use replace(...)")

    def _set(self, **values):
        for field, value in values.items():
            object.__setattr__(self, field, value)

    # ---------------------------------------------------------------------------------------------- evaluation
    def _columns(self, x):
        return x if self.active_dims is None else x[..., list(self.active_dims)]

    def gram(self, z):
        """``k_g(Z_g, Z_g)`` for ``z`` ``[G, M, D]``: ``[G, M, M]``."""
        return self._gram(self._columns(z))

    def cross(self, z, x):
        """``k_g(Z_g, x)`` for ``z`` ``[G, M, D]`` and rows ``x`` ``[B, D]`` shared by the GPs: ``[G, M, B]``."""
        return self._cross(self._columns(z), self._columns(x))

    def diag(self, x):
        """``k_g(x_b, x_b)`` for rows ``x`` ``[B, D]``: ``[G, B]``."""
        return self._diag(self._columns(x))

    def amplitude(self):
        """A scale of the kernel's values per GP, ``[G]``: what the models' relative jitter multiplies."""
        return self.variance.value

    def polynomial_degree(self) -> int | None:
        """The degree of ``k(x, x')`` as a polynomial in ``x`` (:class:`Linear` 1, :class:`Constant` 0, a sum the
        larger, a product the sum of its terms'), None for a kernel that is none: how many Gauss–Hermite points
        integrate it exactly under a Gaussian input (:mod:`pep_gp.core.input_quadrature`)."""
        return None

    def log_prior(self):
        """``Σ log p(r)`` over the priors of every term's parameters, each a density of the stored logarithm
        ``r`` (:mod:`pep_gp.core.priors`: the value's density plus ``log |dθ/dr| = r``); None without priors."""
        terms = [log_density(prior, LOG.forward, getattr(term, field).raw)
                 for term in self.terms() for field, prior in term.prior]
        return sum(terms[1:], terms[0]) if terms else None

    # ---------------------------------------------------------------------------------------------- algebra
    def __add__(self, other: "Kernel") -> "Sum":
        return Sum(self, _as_kernel(other))

    def __radd__(self, other):
        return Sum(_as_kernel(other), self)

    def __mul__(self, other: "Kernel") -> "Product":
        return Product(self, _as_kernel(other))

    def __rmul__(self, other):
        return Product(_as_kernel(other), self)

    # ---------------------------------------------------------------------------------------------- building
    def terms(self) -> tuple["Kernel", ...]:
        """The leaf kernels, left to right."""
        return (self,)

    def bank(self, groups: int, dims: int, lengthscales=None) -> "Kernel":
        """This kernel for ``groups`` GPs on ``dims`` input columns: every value broadcast to a leading axis of
        ``groups`` (a lengthscale given as one number stays one shared by the columns, ``[G, 1]``), and a
        lengthscale left as None set to ``lengthscales`` (the model's start from the data, ``[D]`` or one
        value, restricted to ``active_dims``). ValueError names an ``active_dims`` outside the columns or a
        value of the wrong length."""
        if self.active_dims is not None and not all(0 <= d < dims for d in self.active_dims):
            raise ValueError(f"{self.name}: active_dims {list(self.active_dims)} must lie in 0..{dims - 1} "
                             f"(the data have {dims} columns)")
        width = dims if self.active_dims is None else len(self.active_dims)
        values = {}
        for field in self.parameters:
            param = getattr(self, field)
            per_column = field in ("lengthscales", "period")
            if param is None:
                if lengthscales is None or field != "lengthscales":
                    raise ValueError(f"{self.name}: {field} has no value and the model gives no start")
                start = np.asarray(lengthscales, dtype=float).reshape(-1)
                if start.size == dims and width != dims:
                    start = start[list(self.active_dims)]
                param = Positive.of(start)
            xp = array_module(param.raw)  # numpy for a host value: no program compiled per shape
            raw = xp.asarray(param.raw, dtype=float)
            if per_column:
                raw = raw.reshape(-1) if raw.ndim < 2 else raw
                if raw.shape[-1] not in (1, width):
                    raise ValueError(f"{self.name}: {field} needs 1 or {width} values (one per active column); "
                                     f"got {raw.shape[-1]}")
                raw = xp.broadcast_to(raw, (groups, raw.shape[-1]))
            else:
                raw = xp.broadcast_to(raw.reshape(-1) if raw.ndim else raw, (groups,))
            values[field] = Positive(on_device(raw) if xp is np else jnp.array(raw), param.fixed)
        return self.replace(**values)

    def with_products(self, products: ProductDtype) -> "Kernel":
        """This kernel with every stationary term's products in ``products`` (:class:`Stationary`)."""
        return self.replace(products=products) if self.stationary else self

    def replace(self, **values) -> "Kernel":
        """A copy with some fields replaced."""
        kernel = object.__new__(type(self))
        for field in self.parameters + self.statics:
            object.__setattr__(kernel, field, values.get(field, getattr(self, field)))
        return kernel

    def to_dict(self) -> dict[str, Any]:
        """The JSON description :func:`from_dict` rebuilds this kernel from: its name, its constrained values (one
        number, or a list per GP/column), the fixed ones and ``active_dims``."""
        out: dict[str, Any] = {"name": self.name}
        for field in self.parameters:
            param = getattr(self, field)
            if param is not None:
                value = np.asarray(param.value, dtype=float)
                out[field] = value.tolist() if value.ndim else float(value)
        fixed = [field for field in self.parameters if getattr(self, field) is not None and getattr(self, field).fixed]
        if fixed:
            out["fixed"] = fixed
        if self.prior:
            out["prior"] = {field: prior_to_dict(prior) for field, prior in self.prior}
        for field in self.statics:
            if field == "active_dims" and self.active_dims is not None:
                out[field] = list(self.active_dims)
            elif field == "products" and self.products != "float64":
                out[field] = self.products
        return out

    def __repr__(self):
        parts = []
        for field in self.parameters:
            param = getattr(self, field)
            if param is not None:
                value = np.asarray(jax.device_get(param.value)).ravel()
                text = f"{value[0]:.4g}" if np.all(value == value[0]) else f"[{', '.join(f'{v:.4g}' for v in value)}]"
                parts.append(f"{field}={text}" + (" (fixed)" if param.fixed else "")
                             + "".join(f" (prior {prior.name})" for name, prior in self.prior if name == field))
        parts += [f"active_dims={list(self.active_dims)}"] if self.active_dims is not None else []
        return f"{type(self).__name__}({', '.join(parts)})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(repr(self.to_dict()))


def _positive(name: str, value, fixed) -> Positive | None:
    if value is None:
        return None
    if isinstance(value, Positive):
        return value
    try:
        return Positive.of(value, name in fixed)
    except ValueError:
        raise ValueError(f"{name} must be positive and finite; got {value!r}") from None


def _priors(kernel: Kernel, prior) -> tuple[tuple[str, Any], ...]:
    """``prior`` (a table of parameter name → prior or its description) as the kernel's ``(name, prior)`` pairs
    in parameter order (ValueError naming an unknown parameter or distribution)."""
    prior = dict(prior or {})
    unknown = sorted(set(prior) - set(type(kernel).parameters))
    if unknown:
        raise ValueError(f"{type(kernel).__name__}: prior names {unknown}; its parameters are "
                         f"{list(type(kernel).parameters)}")
    try:
        return tuple((field, prior_from_dict(prior[field])) for field in type(kernel).parameters if field in prior)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{type(kernel).__name__}: {error}") from None


def _init(kernel: Kernel, fixed, active_dims, prior=None, **values):
    """Set a leaf kernel's fields from constrained ``values`` (checked), ``fixed`` names, ``active_dims`` and
    ``prior`` (a table of parameter name → prior, :mod:`pep_gp.core.priors`)."""
    fixed = (fixed,) if isinstance(fixed, str) else tuple(fixed)
    unknown = sorted(set(fixed) - set(type(kernel).parameters))
    if unknown:
        raise ValueError(f"{type(kernel).__name__}: fixed names {unknown}; its parameters are "
                         f"{list(type(kernel).parameters)}")
    kernel._set(prior=_priors(kernel, prior))
    if active_dims is not None:
        active_dims = tuple(int(d) for d in np.atleast_1d(active_dims))
        if not active_dims or len(set(active_dims)) != len(active_dims):
            raise ValueError(f"{type(kernel).__name__}: active_dims must be distinct column indices; got {active_dims}")
    kernel._set(active_dims=active_dims, **{name: _positive(name, value, fixed) for name, value in values.items()})


class Stationary(Kernel):
    """A kernel ``σ² f(r²)`` of the scaled squared distance ``r² = Σ_d (x_d − x'_d)²/ℓ_d²`` (ARD: one ``ℓ`` per
    active column; one value: shared). Subclasses give the profile ``f`` (:meth:`profile`).

    ``products``: dtype of the matrix products over the input dimension D, the O(G·M·B·D) and O(G·M²·D)
    part of the cost, and of the Gram matrices' squared norms; a static field. ``"float32"`` halves their
    time on a CPU and leaves an absolute error ``~6e-8·(‖z − c‖² + ‖x − c‖²)/ℓ²`` in the squared distances
    (``c`` the centre of the inducing inputs, :func:`_centre`); the distances, the profile and everything
    downstream stay in the inputs' dtype. ``"float64"`` (default) keeps all of it exact to double precision.
    (The cross matrices keep their norms in the inputs' dtype: summed in float32 they took the distances past
    that bound, which tests/core/test_primitives.py checks.)
    """

    parameters = ("lengthscales", "variance")
    statics = ("active_dims", "products", "prior")
    stationary = True
    rough: ClassVar[bool] = False  # f has a kink at r = 0: distances within the expansion's rounding are 0

    def __init__(self, lengthscales=None, variance=1.0, *, fixed=(), active_dims=None,
                 products: ProductDtype = "float64", prior=None):
        check_product_dtype(products)
        _init(self, fixed, active_dims, prior, lengthscales=lengthscales, variance=variance)
        self._set(products=products)

    def profile(self, sq):
        """``f(r²)``, elementwise."""
        raise NotImplementedError

    def _snapped(self, sq, norms):
        """``r²`` with values below the expansion's rounding, ``8ε·(‖z − c‖² + ‖x − c‖²)/ℓ²``, set to 0 for a
        :attr:`rough` profile: at coincident points the rounding (~1e-16) would move ``r = √r²`` by ~1e-8, and
        a Matérn kernel with it (its ``exp(−r)``); a smooth profile changes by ~1e-16 and keeps ``r²``."""
        if not self.rough:
            return jnp.maximum(sq, 0.0)
        return jnp.where(sq <= 8.0 * jnp.finfo(self.products).eps * norms, 0.0, sq)

    def _lengthscales(self, dims):
        ls = self.lengthscales.value
        return jnp.broadcast_to(ls, (ls.shape[0], dims))

    def _gram(self, z):
        # Σ_d (z_d − z'_d)²/ℓ_d² expanded about the centre of z, the products in `products`; the
        # diagonal is exactly 0 (its rounding would move r = √r² by ~1e-8).
        scaled = (z - _centre(z)) / self._lengthscales(z.shape[-1])[:, None, :]
        in_products = scaled.astype(self.products)  # the norms too: one pass over [G, M, D] in that dtype
        norms = jnp.sum(in_products**2, axis=-1).astype(scaled.dtype)
        inner = _symmetric_gram(in_products).astype(scaled.dtype)
        both = norms[:, :, None] + norms[:, None, :]
        sq = self._snapped(both - 2.0 * inner, both)
        off_diagonal = ~jnp.eye(z.shape[1], dtype=bool)
        return self.variance.value[:, None, None] * self.profile(jnp.where(off_diagonal, sq, 0.0))

    def _cross(self, z, x):
        # The weights on z's side only: x is data (not differentiated), so the backward pass needs one
        # [G, M, D] matrix product instead of two.
        centre = _centre(z)  # the expansion point of `gram`: inside the data, where Z lies
        z, x = z - centre, x - centre
        weights = 1.0 / self._lengthscales(z.shape[-1]) ** 2
        weighted = z * weights[:, None, :]
        inner = jnp.einsum("gmd,bd->gmb", weighted.astype(self.products), x.astype(self.products)).astype(x.dtype)
        both = jnp.sum(z * weighted, axis=-1)[:, :, None] + (weights @ (x**2).T)[:, None, :]
        return self.variance.value[:, None, None] * self.profile(self._snapped(both - 2.0 * inner, both))

    def _diag(self, x):
        variance = self.variance.value
        return jnp.broadcast_to(variance[:, None], (variance.shape[0], x.shape[0])).astype(x.dtype)


@register_kernel("se")
class SquaredExponential(Stationary):
    """``σ² exp(−r²/2)`` (Rasmussen & Williams 2006, eq. 4.9; ARD eq. 5.1).

    Example:
        >>> k = SquaredExponential(lengthscales=[1.0, 2.0], variance=1.5).bank(1, 2)
        >>> k.gram(jnp.zeros((1, 3, 2))).shape
        (1, 3, 3)
    """

    def profile(self, sq):
        return jnp.exp(-0.5 * sq)


@register_kernel("matern12")
class Matern12(Stationary):
    """Matérn ν = 1/2 (the exponential kernel): ``σ² exp(−r)`` (Rasmussen & Williams 2006, eq. 4.14)."""

    rough = True

    def profile(self, sq):
        return jnp.exp(-_safe_sqrt(sq))


@register_kernel("matern32")
class Matern32(Stationary):
    """Matérn ν = 3/2: ``σ²(1 + √3 r) exp(−√3 r)`` (Rasmussen & Williams 2006, eq. 4.17)."""

    rough = True

    def profile(self, sq):
        r = jnp.sqrt(3.0) * _safe_sqrt(sq)
        return (1.0 + r) * jnp.exp(-r)


@register_kernel("matern52")
class Matern52(Stationary):
    """Matérn ν = 5/2: ``σ²(1 + √5 r + 5r²/3) exp(−√5 r)`` (Rasmussen & Williams 2006, eq. 4.17)."""

    rough = True

    def profile(self, sq):
        r = jnp.sqrt(5.0) * _safe_sqrt(sq)
        return (1.0 + r + r**2 / 3.0) * jnp.exp(-r)


@register_kernel("rq")
class RationalQuadratic(Stationary):
    """``σ²(1 + r²/(2a))^(−a)``, a scale mixture of squared exponentials (Rasmussen & Williams 2006, eq. 4.19);
    ``a → ∞`` is the squared exponential."""

    parameters = ("lengthscales", "variance", "alpha")

    def __init__(self, lengthscales=None, variance=1.0, alpha=1.0, *, fixed=(), active_dims=None,
                 products: ProductDtype = "float64", prior=None):
        check_product_dtype(products)
        _init(self, fixed, active_dims, prior, lengthscales=lengthscales, variance=variance, alpha=alpha)
        self._set(products=products)

    def profile(self, sq):
        alpha = self.alpha.value[:, None, None]
        return jnp.exp(-alpha * jnp.log1p(sq / (2.0 * alpha)))


@register_kernel("periodic")
class Periodic(Kernel):
    """``σ² exp(−2 Σ_d sin²(π(x_d − x'_d)/p_d)/ℓ_d²)`` (MacKay 1998; Rasmussen & Williams 2006, eq. 4.31), with
    one period or one per active column. Evaluated from the differences themselves, ``[G, M, B, D]`` floats
    at a time (no float32 products: it is not a function of ``r²``)."""

    parameters = ("lengthscales", "variance", "period")

    def __init__(self, lengthscales=None, variance=1.0, period=1.0, *, fixed=(), active_dims=None, prior=None):
        _init(self, fixed, active_dims, prior, lengthscales=lengthscales, variance=variance, period=period)

    def _between(self, a, b):
        """``[G, M, B]`` for ``a`` ``[G, M, D]`` and ``b`` ``[G, B, D]``."""
        diff = a[:, :, None, :] - b[:, None, :, :]
        sines = jnp.sin(jnp.pi * diff / self.period.value[:, None, None, :]) / self.lengthscales.value[:, None, None, :]
        return self.variance.value[:, None, None] * jnp.exp(-2.0 * jnp.sum(sines**2, axis=-1))

    def _gram(self, z):
        return self._between(z, z)

    def _cross(self, z, x):
        return self._between(z, jnp.broadcast_to(x, (z.shape[0], *x.shape)))

    _diag = Stationary._diag


@register_kernel("linear")
class Linear(Kernel):
    """``σ² xᵀx'`` (Rasmussen & Williams 2006, eq. 4.22 with ``Σ_p = σ²I``): Bayesian linear regression through
    the origin. Its Gram matrix has rank at most D: add it to a stationary kernel (``Linear() + Matern52()``)
    when M exceeds the active columns."""

    parameters = ("variance",)

    def __init__(self, variance=1.0, *, fixed=(), active_dims=None, prior=None):
        _init(self, fixed, active_dims, prior, variance=variance)

    def polynomial_degree(self):
        return 1

    def _gram(self, z):
        return self.variance.value[:, None, None] * _symmetric_gram(z)

    def _cross(self, z, x):
        return self.variance.value[:, None, None] * jnp.einsum("gmd,bd->gmb", z, x)

    def _diag(self, x):
        return self.variance.value[:, None] * jnp.sum(x**2, axis=-1)[None, :]


@register_kernel("constant")
class Constant(Kernel):
    """``σ²`` for every pair of inputs: a constant offset of the latent function (with :class:`Linear`,
    scikit-learn's ``DotProduct``)."""

    parameters = ("variance",)

    def __init__(self, variance=1.0, *, fixed=(), active_dims=None, prior=None):
        _init(self, fixed, active_dims, prior, variance=variance)

    def polynomial_degree(self):
        return 0

    def _gram(self, z):
        return jnp.broadcast_to(self.variance.value[:, None, None], (z.shape[0], z.shape[1], z.shape[1])).astype(z.dtype)

    def _cross(self, z, x):
        return jnp.broadcast_to(self.variance.value[:, None, None], (z.shape[0], z.shape[1], x.shape[0])).astype(z.dtype)

    _diag = Stationary._diag


class _Combination(Kernel):
    """Two kernels combined elementwise (``combine``)."""

    parameters = ("left", "right")
    statics = ()
    active_dims = None

    def __init__(self, left: Kernel, right: Kernel):
        self._set(left=_as_kernel(left), right=_as_kernel(right))

    def gram(self, z):
        return self.combine(self.left.gram(z), self.right.gram(z))

    def cross(self, z, x):
        return self.combine(self.left.cross(z, x), self.right.cross(z, x))

    def diag(self, x):
        return self.combine(self.left.diag(x), self.right.diag(x))

    def amplitude(self):
        return self.combine(self.left.amplitude(), self.right.amplitude())

    def terms(self):
        return self.left.terms() + self.right.terms()

    def polynomial_degree(self):
        degrees = (self.left.polynomial_degree(), self.right.polynomial_degree())
        return None if None in degrees else self.combine_degrees(*degrees)

    def bank(self, groups, dims, lengthscales=None):
        return type(self)(self.left.bank(groups, dims, lengthscales), self.right.bank(groups, dims, lengthscales))

    def with_products(self, products):
        return type(self)(self.left.with_products(products), self.right.with_products(products))

    def to_dict(self):
        return {"name": self.name, "terms": [self.left.to_dict(), self.right.to_dict()]}

    def __repr__(self):
        return f"{self.left!r} {self.symbol} {self.right!r}"


@register_kernel("sum")
class Sum(_Combination):
    """``k1 + k2``."""

    symbol = "+"
    combine_degrees = staticmethod(max)

    @staticmethod
    def combine(a, b):
        return a + b


@register_kernel("product")
class Product(_Combination):
    """``k1 · k2`` (elementwise)."""

    symbol = "*"

    @staticmethod
    def combine(a, b):
        return a * b

    @staticmethod
    def combine_degrees(a, b):
        return a + b

    def __repr__(self):
        wrap = lambda k: f"({k!r})" if isinstance(k, Sum) else repr(k)
        return f"{wrap(self.left)} * {wrap(self.right)}"


def _as_kernel(value) -> Kernel:
    """A kernel, or a positive number as a :class:`Constant`."""
    if isinstance(value, Kernel):
        return value
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        return Constant(float(value))
    raise TypeError(f"expected a kernel or a positive number; got {type(value).__name__}")


def from_dict(description) -> Kernel:
    """The kernel of a :meth:`Kernel.to_dict` description (ValueError naming an unknown kernel or field)."""
    from difflib import get_close_matches

    if isinstance(description, Kernel):
        return description
    if not isinstance(description, dict) or "name" not in description:
        raise ValueError(f"a kernel description is a table with a 'name'; got {description!r}")
    values = dict(description)
    name = str(values.pop("name")).lower()
    if name not in KERNELS:
        close = get_close_matches(name, KERNELS, n=1)
        raise ValueError(f"unknown kernel {name!r}; expected one of {', '.join(KERNELS)}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    cls = KERNELS[name]
    if issubclass(cls, _Combination):
        terms = values.pop("terms", None)
        if values or not isinstance(terms, list) or len(terms) < 2:
            raise ValueError(f"kernel {name!r} takes 'terms', a list of at least two kernels; got {description!r}")
        kernels = [from_dict(term) for term in terms]
        combined = kernels[0]
        for kernel in kernels[1:]:
            combined = cls(combined, kernel)
        return combined
    accepted = set(cls.parameters) | {"fixed", "active_dims", "prior"} | ({"products"} if issubclass(cls, Stationary) else set())
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise ValueError(f"kernel {name!r}: unknown fields {unknown}; it takes {sorted(accepted)}")
    return cls(**values)


def parse(text: str) -> Kernel:
    """A kernel from its short spelling: names of :data:`KERNELS` joined by ``+`` and ``*`` (``*`` binds
    tighter), each with its default values, e.g. ``"matern52+linear"`` or ``"se*periodic"``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a kernel spelling is names joined by '+' and '*'; got {text!r}")
    total = None
    for summand in text.split("+"):
        factors = [from_dict({"name": part.strip()}) for part in summand.split("*")]
        product = factors[0]
        for factor in factors[1:]:
            product = product * factor
        total = product if total is None else total + product
    return total
