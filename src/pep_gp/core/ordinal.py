"""The ordinal probit likelihood with learned cut points (Chu & Ghahramani 2005), as a Power-EP site.

Labels ``y ∈ {0, …, C − 1}`` are ordered categories of one latent function ``f``:

    p(y = k | f) = Φ(b_{k+1} − f) − Φ(b_k − f),      b_0 = −∞ < b_1 < … < b_{C−1} < b_C = +∞

(Chu & Ghahramani 2005 eq. 4, its noise ``σ`` set to 1: with a learned kernel amplitude the pair
``(σ, b)`` adds nothing, since scaling ``f``, ``b`` and ``σ`` together leaves every probability as it is).
The cut points are stored unconstrained, ``b_1`` as it is and the gaps ``b_{k+1} − b_k`` as softplus of
their leaves, so every value of the leaves is an ordered set of cut points.

Under a Gaussian ``f ~ N(m, v)`` the class probability is a difference of two probits
(Chu & Ghahramani 2005 eq. 15; Rasmussen & Williams 2006 eq. 3.82 for one of them),

    Z_k = Φ(z_{k+1}) − Φ(z_k),      z_j = (b_j − m)/√(1 + v),

which gives EP's (α = 1) tilted normaliser and moments in closed form (:meth:`Ordinal.tilted_moments`);
for ``0 < α < 1`` the composite rule of :class:`~pep_gp.core.quadrature.TiltedQuadrature` integrates
``p(y|f)^α``, and Gauss–Hermite the ``α → 0`` term ``E_q[log p(y|f)]``, as for the likelihoods of
:class:`~pep_gp.core.likelihoods.QuadratureLikelihood`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr
from jax.scipy.stats import norm
from scipy.special import ndtri

from .parameters import on_device, positive, unconstrain_positive
from .quadrature import GaussHermite, TiltedQuadrature, tilted_moments_by_quadrature


def log1mexp(x):
    """``log(1 − eˣ)`` for ``x ≤ 0``, accurate on both sides of ``−log 2`` (Mächler 2012)."""
    near = x > -np.log(2.0)
    return jnp.where(near, jnp.log(-jnp.expm1(jnp.where(near, x, -1.0))), jnp.log1p(-jnp.exp(jnp.where(near, -1.0, x))))


def log_probit_interval(low, high):
    """``log(Φ(high) − Φ(low))`` for finite ``low < high``: in the upper tail as ``Φ(−low) − Φ(−high)``, so that
    neither difference loses its digits to ``Φ ≈ 1``."""
    upper = low + high > 0.0
    low, high = jnp.where(upper, -high, low), jnp.where(upper, -low, high)
    top = log_ndtr(high)
    return top + log1mexp(log_ndtr(low) - top)


@dataclass(frozen=True)
class Ordinal:
    """Ordered labels ``0 … C − 1`` of one latent ``f``: ``p(y = k | f) = Φ(b_{k+1} − f) − Φ(b_k − f)``
    (Chu & Ghahramani 2005 eq. 4 with unit noise; see the module docstring), ``C = n_classes``.

    Its parameters are ``{"raw_cut_points": [C − 1]}``: ``b_1`` and the softplus-inverse of each gap
    (:meth:`cut_points`).
    """

    n_classes: int = 3
    quadrature: GaussHermite = GaussHermite()
    tilted_quadrature: TiltedQuadrature = TiltedQuadrature()
    name: str = field(default="ordinal", init=False)

    def __post_init__(self):
        if not (isinstance(self.n_classes, (int, np.integer)) and self.n_classes >= 2):
            raise ValueError(f"an ordinal likelihood needs at least 2 classes; got n_classes={self.n_classes!r}")

    def init_params(self, class_counts=None) -> dict:
        """Cut points that give a latent ``f ~ N(0, 1)`` (the prior at a unit kernel amplitude) the labels'
        cumulative frequencies: ``P(y < k) = Φ(b_k/√2)``, so ``b_k = √2 Φ⁻¹(P(y < k))`` (Chu & Ghahramani 2005
        eq. 15 at ``m = 0``, ``v = 1``), from ``class_counts`` ``[C]`` each raised by ½ (an empty class keeps a
        gap); equal counts when None."""
        counts = np.ones(self.n_classes) if class_counts is None else np.asarray(class_counts, dtype=np.float64)
        if counts.shape != (self.n_classes,) or np.any(counts < 0):
            raise ValueError(f"class_counts must be {self.n_classes} non-negative counts; got {counts.tolist()}")
        cumulative = np.cumsum(counts + 0.5)[:-1] / np.sum(counts + 0.5)
        return self.params_of(np.sqrt(2.0) * ndtri(cumulative))

    def params_of(self, cut_points) -> dict:
        """The stored parameters of given cut points ``b_1 < … < b_{C−1}`` (:meth:`cut_points`' inverse; ValueError
        unless ``C − 1`` strictly increasing finite values)."""
        cuts = np.asarray(cut_points, dtype=np.float64)
        if cuts.shape != (self.n_classes - 1,) or not (np.all(np.isfinite(cuts)) and np.all(np.diff(cuts) > 0)):
            raise ValueError(f"{self.n_classes} classes need {self.n_classes - 1} strictly increasing finite cut "
                             f"points; got {cuts.tolist()}")
        return {"raw_cut_points": on_device(np.concatenate([cuts[:1], unconstrain_positive(np.diff(cuts))]))}

    @staticmethod
    def cut_points(params):
        """``b_1 < … < b_{C−1}``: the first leaf, then the running sum of the softplus of the others."""
        raw = params["raw_cut_points"]
        return jnp.cumsum(jnp.concatenate([raw[:1], Ordinal.gaps(raw)]))

    @staticmethod
    def gaps(raw):
        """The gaps ``b_{k+1} − b_k`` ``[C − 2]`` of the stored cut points ``raw``: the softplus of its leaves after
        the first. A prior on the cut points is a density of each gap (positive, as every prior of
        :mod:`pep_gp.core.priors`; ``b_1``, their location, has none), the Jacobian that of the softplus
        (:func:`pep_gp.core.log_prior.log_prior`)."""
        return positive(raw[1:])

    def edges(self, params, y):
        """The cut points below and above each label ``y`` (``[...]`` each), finite, and whether each exists: the
        lowest class has no lower edge and the highest no upper one, where a stand-in one unit from the other
        edge keeps every value and gradient finite (it is never selected)."""
        cuts = self.cut_points(params)
        k = jnp.asarray(y).astype(jnp.int32)
        has_lower, has_upper = k > 0, k < self.n_classes - 1
        lower = cuts[jnp.clip(k - 1, 0, self.n_classes - 2)]
        upper = cuts[jnp.clip(k, 0, self.n_classes - 2)]
        return jnp.where(has_lower, lower, upper - 1.0), jnp.where(has_upper, upper, lower + 1.0), has_lower, has_upper

    @staticmethod
    def _log_mass(low, high, has_lower, has_upper):
        """``log(Φ(high) − Φ(low))`` where both edges exist, ``log Φ(high)`` or ``log Φ(−low)`` where one does."""
        return jnp.where(has_lower & has_upper, log_probit_interval(low, high),
                         jnp.where(has_lower, log_ndtr(-low), log_ndtr(high)))

    def log_prob(self, y, f, params=None):
        params = self.init_params() if params is None else params
        lower, upper, has_lower, has_upper = self.edges(params, y)
        return self._log_mass(lower - f, upper - f, has_lower, has_upper)

    @staticmethod
    def largest_log_prob(params):
        """0: a probability (:meth:`~pep_gp.core.likelihoods.Gaussian.largest_log_prob`)."""
        return 0.0

    def span(self, params, y):
        """Where ``p(y|f)`` varies: an end class at its one edge on the probit's unit scale; a middle class about
        the middle of its interval on the scale ``half-width·√α``, which :class:`~pep_gp.core.quadrature.TiltedQuadrature`
        divides by ``√α`` so that its octaves fall on the two edges (the rule is built for ``α`` given)."""
        lower, upper, has_lower, has_upper = self.edges(params, y)
        inner = has_lower & has_upper
        centre = jnp.where(inner, 0.5 * (lower + upper), jnp.where(has_lower, lower, upper))
        return centre, jnp.where(inner, 0.5 * (upper - lower), 1.0)

    def tilted_moments(self, y, mean, var, alpha=1.0, params=None):
        """``log Z̃``, mean and variance of ``∝ N(f; m, v) p(y|f)^α``. At ``α = 1``, with ``s = √(1 + v)``,
        ``z_± = (b_± − m)/s`` the class's upper and lower edges and ``r_± = N(z_±)/Z``:
        ``log Z̃ = log(Φ(z_+) − Φ(z_−))``, ``∂log Z̃/∂m = (r_− − r_+)/s``,
        ``∂²log Z̃/∂m² = (z_− r_− − z_+ r_+)/s² − (∂log Z̃/∂m)²``, mean ``m + v∂`` and variance ``v + v²∂²``
        (Chu & Ghahramani 2005 eqs. 15–17; Rasmussen & Williams 2006 eq. 3.58); otherwise by quadrature."""
        params = self.init_params() if params is None else params
        if alpha != 1.0:
            centre, width = self.span(params, y)
            return tilted_moments_by_quadrature(lambda f: self.log_prob(jnp.asarray(y)[..., None], f, params), mean,
                                                var, alpha, centre, width, self.tilted_quadrature)
        lower, upper, has_lower, has_upper = self.edges(params, y)
        scale = jnp.sqrt(1.0 + var)
        z_low, z_high = (lower - mean) / scale, (upper - mean) / scale
        log_z = self._log_mass(z_low, z_high, has_lower, has_upper)
        r_low = jnp.where(has_lower, jnp.exp(norm.logpdf(z_low) - log_z), 0.0)
        r_high = jnp.where(has_upper, jnp.exp(norm.logpdf(z_high) - log_z), 0.0)
        slope = (r_low - r_high) / scale
        curvature = (z_low * r_low - z_high * r_high) / scale**2 - slope**2
        return log_z, mean + var * slope, var + var**2 * curvature

    def log_tilted(self, params, y, mean, var, alpha):
        """``log Z̃`` (:meth:`tilted_moments`)."""
        return self.tilted_moments(y, mean, var, alpha, params)[0]

    def expected_log_prob(self, params, y, mean, var):
        """``E_{N(f; m, v)}[log p(y|f)]`` by Gauss–Hermite (Bui, Yan & Turner 2017 eq. 143)."""
        points, log_w = self.quadrature.nodes(mean, var)
        return jnp.sum(jnp.exp(log_w) * self.log_prob(jnp.asarray(y)[..., None], points, params), axis=-1)

    def log_class_probabilities(self, params, mean, var):
        """``log p(y = k | x) = log ∫ N(f; m, v) p(k|f) df`` ``[..., C]`` for every class (the closed form of
        :meth:`tilted_moments` at α = 1), from the latent ``(m, v)`` ``[...]``."""
        labels = jnp.arange(self.n_classes, dtype=jnp.result_type(mean))
        return self.tilted_moments(labels, mean[..., None], var[..., None], 1.0, params)[0]

    def predict(self, params, mean, var):
        """The class probabilities ``[..., C]`` (:meth:`log_class_probabilities`)."""
        return jnp.exp(self.log_class_probabilities(params, mean, var))

    def sample_labels(self, f, rng, params):
        """Labels drawn at latent draws ``f``: the number of cut points below ``f + ε``, ``ε ~ N(0, 1)``."""
        cuts = np.asarray(self.cut_points(params))
        return np.searchsorted(cuts, f + rng.standard_normal(np.shape(f)))
