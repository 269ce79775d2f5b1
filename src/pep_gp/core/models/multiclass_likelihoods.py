"""The row likelihoods of the multi-class GP (:class:`~pep_gp.core.models.multiclass.MultiClassGP`) as objects,
as GPJax's likelihoods are: each says how many factors touch a class, what a block's data term and refined
sites are under the cavity, its predictive and how a label is drawn from latent values; the model asks the
likelihood, never its name.

* :class:`Pairwise`: the product of a row's ``C − 1`` pairwise probits (Villacampa-Calvo & Hernández-Lobato
  2017, eq. 6, the paper's method), ``C − 1`` rank-one sites a row and ``n_c = N + (C − 2)N_c`` factors a class
  (§2.3.1); with label noise its factors are ``ε + (1 − ε)Φ`` (:func:`~.multiclass_sites.robust_log_factor`).
* :class:`WholeRow`: one factor a row, rank one in each class, whose sites are moment-matched from its
  ``log Z_i`` under the cavity (:func:`~.multiclass_sites.row_site_coefficients`; EP, α = 1), ``n_c = N``. A
  subclass gives :meth:`WholeRow.row_log_partition` and :meth:`~MultiClassLikelihood.predict`:
  :class:`Exact` (the probability of the maximum, eq. 1, the integral of eq. 68) and :class:`Softmax` (the
  multinomial logit, the maximum under Gumbel noise, :mod:`pep_gp.core.models.multiclass_softmax`).

A new likelihood is one class (tests/core/test_multiclass_likelihoods.py trains one defined there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from . import multiclass_sites as sites
from . import multiclass_softmax as softmax


def label_side(values, y):
    """The label-class column of ``[B, C]`` values, as ``[B, 1]`` (broadcasts over the other class k)."""
    return jnp.take_along_axis(values, y[:, None], axis=1)


@dataclass(frozen=True)
class MultiClassLikelihood:
    """What a row's factor is; subclasses are frozen (hashable: the model is a static argument of its
    compiled programs). ``model`` below is the :class:`~pep_gp.core.models.multiclass.MultiClassGP` asking
    (its ``alpha``, ``label_noise``, ``num_classes`` and quadrature rules); ``marginals`` and ``fitc`` are its
    :meth:`~pep_gp.core.models.multiclass.MultiClassGP.class_marginals` ``[B, C]``, ``y`` integer labels
    ``[B]``, ``mask`` ``[B]``."""

    name: ClassVar[str]

    def check(self, alpha: float, label_noise: float) -> None:
        """ValueError for a power or label noise this likelihood cannot train with (none by default)."""

    def factor_counts(self, class_rows):
        """The factors touching each class ``[C]`` for the rows of each class ``class_rows`` ``[C]``."""
        raise NotImplementedError

    def site_counts(self, y, mask, num_classes: int):
        """:meth:`factor_counts` of the rows ``y`` not masked out: a block's ``n_{B,c}``, ``[C]``."""
        raise NotImplementedError

    def row_energy(self, model: Any, marginals, fitc, y, mask):
        """The block's data term ``L`` (eq. 34 for the pairs)."""
        raise NotImplementedError

    def row_site_coefficients(self, model: Any, marginals, fitc, y, mask):
        """The refined sites' per-(row, class) coefficients ``Δ_i^c``, ``μ̃_i^c`` ``[B, C]`` (eqs. 26–27)."""
        raise NotImplementedError

    def predict(self, model: Any, mean, var):
        """``log p(y* = c | x*)`` ``[B, C]`` at the latent predictive moments ``[B, C]``."""
        raise NotImplementedError

    def sample_labels(self, f: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Class indices drawn at latent draws ``f`` ``[S, B, C]``: ``argmax_c f_c`` (the step likelihood, its
        noise in ``f``'s variance), ``[S, B]``."""
        return np.argmax(f, axis=2)


@dataclass(frozen=True)
class Pairwise(MultiClassLikelihood):
    """The product of a row's ``C − 1`` pairwise probits (Villacampa-Calvo & Hernández-Lobato 2017, eq. 6)."""

    name: ClassVar[str] = "pairwise"

    def factor_counts(self, class_rows):
        """``n_c = N + (C − 2)N_c`` pair factors touch class ``c`` (Villacampa-Calvo & Hernández-Lobato 2017,
        §2.3.1), ``N = Σ_c N_c``."""
        return jnp.sum(class_rows) + (class_rows.shape[-1] - 2) * class_rows

    def site_counts(self, y, mask, num_classes: int):
        return sites.factor_counts(y, mask, num_classes)

    @staticmethod
    def pairs(marginals, fitc, y):
        """Cavity projections of every pair ``(i, k)``: label side ``[B, 1]``, other side ``[B, C]``, and their
        FITC variances."""
        label = sites.Projections(label_side(marginals.mean, y), label_side(marginals.var, y))
        return label, marginals, label_side(fitc, y), fitc

    def row_energy(self, model: Any, marginals, fitc, y, mask):
        terms = sites.log_partition(*self.pairs(marginals, fitc, y), model.alpha,
                                    label_noise=model.label_noise) / model.alpha
        energy = jnp.sum(jnp.where(sites.factor_mask(y, mask, model.num_classes), terms, 0.0))
        return sites.normalise_energy(energy, model.label_noise, model.num_classes, mask)

    def row_site_coefficients(self, model: Any, marginals, fitc, y, mask):
        refined = sites.refine(*self.pairs(marginals, fitc, y), model.alpha, label_noise=model.label_noise)
        return sites.per_class_coefficients(refined, y, mask)

    def predict(self, model: Any, mean, var):
        return sites.predictive_log_probs(mean, var, model.quadrature, model.label_noise)


@dataclass(frozen=True)
class WholeRow(MultiClassLikelihood):
    """One factor a row: a subclass gives its ``log Z_i`` under the cavity (:meth:`row_log_partition`) and its
    predictive; its sites are EP's (α = 1)."""

    def check(self, alpha: float, label_noise: float) -> None:
        if alpha != 1.0:
            raise ValueError(f"likelihood = {self.name!r} needs alpha = 1 (got alpha = {alpha}): its sites are "
                             "moment-matched for EP (α = 1) only")

    def factor_counts(self, class_rows):
        return jnp.full_like(class_rows, jnp.sum(class_rows))

    def site_counts(self, y, mask, num_classes: int):
        return sites.row_counts(mask, num_classes)

    def row_log_partition(self, model: Any, mean, var, fitc, y):
        """``log Z_i`` of each row's factor at its cavity projections ``a``, ``w`` and FITC variances ``s``
        ``[B, C]``: the likelihood's expectation under ``f^c ~ N(a^c, w^c + s^c)``, ``[B]``."""
        raise NotImplementedError

    def row_energy(self, model: Any, marginals, fitc, y, mask):
        log_z = self.row_log_partition(model, marginals.mean, marginals.var, fitc, y)
        return jnp.sum(jnp.where(mask, log_z, 0.0))

    def row_site_coefficients(self, model: Any, marginals, fitc, y, mask):
        return sites.row_site_coefficients(lambda a, w: self.row_log_partition(model, a, w, fitc, y),
                                           marginals.mean, marginals.var, fitc, mask)


@dataclass(frozen=True)
class Exact(WholeRow):
    """The probability of the maximum itself (eq. 1 with the latent noise; with label noise its normalised
    label-noise form): :func:`~pep_gp.core.models.multiclass_sites.exact_log_partition`."""

    name: ClassVar[str] = "exact"

    def row_log_partition(self, model: Any, mean, var, fitc, y):
        return sites.exact_log_partition(mean, var, fitc, y, model.quadrature, model.label_noise)

    def predict(self, model: Any, mean, var):
        return sites.predictive_log_probs(mean, var, model.quadrature, model.label_noise)


@dataclass(frozen=True)
class Softmax(WholeRow):
    """The multinomial logit ``exp(f_y)/Σ_k exp(f_k)``, the maximum under Gumbel noise; its predictive is
    ``E[softmax(f)]`` (:func:`~pep_gp.core.models.multiclass_softmax.softmax_log_probs`)."""

    name: ClassVar[str] = "softmax"

    def check(self, alpha: float, label_noise: float) -> None:
        super().check(alpha, label_noise)
        if label_noise != 0.0:
            raise ValueError(f"likelihood = 'softmax' takes no label_noise (got {label_noise}): the softmax is "
                             "already the maximum of the latent values under Gumbel noise")

    def row_log_partition(self, model: Any, mean, var, fitc, y):
        return softmax.softmax_log_probs(mean, var + fitc, model.softmax_quadrature, y)

    def predict(self, model: Any, mean, var):
        return softmax.softmax_log_probs(mean, var, model.softmax_quadrature)

    def sample_labels(self, f: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``argmax_c (f_c + g_c)``, ``g_c`` standard Gumbel: ``p = softmax(f)``."""
        return np.argmax(f + rng.gumbel(size=f.shape), axis=2)


LIKELIHOODS: dict[str, type[MultiClassLikelihood]] = {cls.name: cls for cls in (Pairwise, Exact, Softmax)}
"""The likelihoods a model's settings name (``likelihood = "pairwise"``, …)."""


def check_likelihood(likelihood: str | MultiClassLikelihood, alpha: float,
                     label_noise: float = 0.0) -> MultiClassLikelihood:
    """The likelihood ``likelihood`` names (or is), after refusing an unknown name and a power or label noise
    it cannot train with (ValueError)."""
    if isinstance(likelihood, str):
        if likelihood not in LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {tuple(LIKELIHOODS)}; got {likelihood!r}")
        likelihood = LIKELIHOODS[likelihood]()
    elif not isinstance(likelihood, MultiClassLikelihood):
        raise ValueError(f"likelihood must be a name of {tuple(LIKELIHOODS)} or a MultiClassLikelihood; got "
                         f"{likelihood!r}")
    likelihood.check(alpha, label_noise)
    return likelihood
