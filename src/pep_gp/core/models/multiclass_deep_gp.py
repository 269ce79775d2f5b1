"""Multi-class deep GPs with approximate EP: the deep GP of Bui et al. (2016) with ``C`` output GPs and the
multi-class factors of Villacampa-Calvo & Hernández-Lobato (2017).

The last layer has one GP per class, each with a latent noise ``σ_{0,c}`` on the diagonal of its ``K_uu``
and on ``κ`` (Villacampa-Calvo & Hernández-Lobato 2017, eqs. 1–3, as :class:`pep_gp.core.models.multiclass.MultiClassGP`),
and the likelihood of a row is ``Π_{k≠y} Θ(f^y − f^k)`` with each pair ``(n, k)`` its own EP factor
(eq. 6). Moment propagation (:meth:`pep_gp.core.models.deep_gp.DeepGP.output_marginals`) gives every
class's output at row ``n`` as an independent Gaussian ``N(m_c, v_c)`` under the cavities, so the tilted
normaliser of a pair is the probit difference

    log Z_{n,k} = log P(f^y > f^k) = log Φ((m_y − m_k)/√(v_y + v_k))          (eq. 34 at α = 1),

and the energy is the deep GP's boxed ``F`` (Bui et al. 2016, §4.2) with these factors:

    F = Σ_g [φ(q_g) − φ(p_g) + n_g(φ(cav_g) − φ(q_g))] + Σ_n Σ_{k≠y_n} log Z_{n,k},

where GP ``g`` is touched by ``n_g`` factors and its cavity is ``p·t^{1 − 1/n_g}``: an output GP of class
``c`` by ``n_c = N + (C − 2)N_c`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1), a hidden GP by all
``N(C − 1)``. With no hidden layer this is exactly the direct-mode energy of
:class:`~pep_gp.core.models.multiclass.MultiClassGP` at ``α = 1``. Only ``α = 1`` is offered: ``Θ^α = Θ``,
and the multi-class model's power acts on a factor with the FITC variance integrated out, which a layer
with uncertain inputs has no counterpart of. Prediction is eq. (68) on the propagated moments under ``q``, or
eq. (68) on each path of the deep GP's Monte Carlo mixture, averaged over the paths
(:meth:`MultiClassDeepGP.mixture_log_proba`; the model's ``mixture_samples`` paths in the pipeline's predictive).

Each class's output GP may have a prior mean of its own, ``f_c = m_c(h) + g_c(h)`` (``params.mean``,
:meth:`~pep_gp.core.means.MeanFunction.stacked`, as the direct multi-class GP's), whose moments the pass adds
(:func:`~pep_gp.core.models.deep_gp.with_output_mean`); without a hidden layer the model is then the direct
multi-class GP with the same means.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from ..parameters import LOG, on_device
from . import multiclass_sites as sites
from .deep_gp import DeepGP, DeepGPParams, LayerParams, Mixture
from .multiclass import class_factor_counts, rows_per_class
from .multiclass_likelihoods import label_side

CLASS_NOISE = "raw_class_noise"
"""The key of the output layer's parameters holding ``log σ_{0,c}`` ``[C]``."""


@dataclass(frozen=True)
class ClassPairs:
    """The multi-class output ``Π_{k≠y} Θ(f^y − f^k)`` of ``num_classes`` noisy latent GPs, one EP factor per
    pair (Villacampa-Calvo & Hernández-Lobato 2017, eq. 6); its parameters are the latent noises ``σ_{0,c}``,
    which the deep GP adds to its output GPs' diagonals (:meth:`MultiClassDeepGP.layer_bank`).

    Example:
        >>> pairs = ClassPairs(3)
        >>> mean, var = jnp.array([[1.0, 0.0, -1.0]]), jnp.ones((1, 3))
        >>> bool(jnp.allclose(jnp.exp(pairs.predict({}, mean, var)).sum(), 1.0))
        True
    """

    num_classes: int
    quadrature: sites.PredictiveQuadrature = sites.PredictiveQuadrature()
    name: str = field(default="class-pairs", init=False)

    def init_params(self, noise: float = 1.0) -> dict:
        """``σ_{0,c} = noise`` for every class (1: Villacampa-Calvo & Hernández-Lobato 2017, §4)."""
        return {CLASS_NOISE: on_device(LOG.inverse(np.full(self.num_classes, noise, dtype=float)))}

    @staticmethod
    def class_noise(params: dict):
        """``σ_{0,c}`` ``[C]``."""
        return LOG.forward(params[CLASS_NOISE])

    def log_tilted(self, params: dict, y, mean, var, alpha: float = 1.0):
        """``Σ_{k≠y} log Φ((m_y − m_k)/√(v_y + v_k))`` per row ``[B]`` for labels ``y`` ``[B]`` (floats holding
        integers) and the classes' moments ``mean``, ``var`` ``[B, C]`` (Villacampa-Calvo & Hernández-Lobato
        2017, eq. 34 with the FITC variance and the noise inside ``v``); ``Θ^α = Θ``, so ``α`` changes nothing."""
        y = y.astype(jnp.int32)
        label = sites.Projections(label_side(mean, y), label_side(var, y))
        terms = sites.log_partition(label, sites.Projections(mean, var), 0.0, 0.0)
        others = jnp.arange(self.num_classes)[None, :] != y[:, None]
        return jnp.sum(jnp.where(others, terms, 0.0), axis=1)

    def predict(self, params: dict, mean, var):
        """``log p(y = c | x)`` ``[B, C]`` of eq. (68) from the classes' predictive moments."""
        return sites.predictive_log_probs(mean, var, self.quadrature)


@dataclass(frozen=True)
class MultiClassDeepGP(DeepGP):
    """Multi-class deep GP trained with approximate EP (module docstring); the state is
    :class:`~pep_gp.core.models.deep_gp.DeepGPParams` with ``C`` GPs in the last layer.

    Args:
        likelihood: a :class:`ClassPairs` of ``C`` classes.
        alpha: 1 (the only power offered, module docstring).
        jitter: relative jitter on every ``K_uu``.
        mixture_samples: the paths of the Monte Carlo mixture behind the pipeline's class probabilities
            (:meth:`mixture_log_proba`: ``predict_proba``, ``pep predict``, the held-out metrics); 0, the
            default: eq. (68) on one forward pass's moments (:meth:`predict`).

    The factor counts ``n_c`` need the rows of each class, which the methods take as data (``class_rows``
    ``[C]``, :meth:`data_size`), as :class:`~pep_gp.core.models.multiclass.MultiClassGP`'s do.

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (30, 2)); y = jnp.argmax(x @ jnp.ones((2, 3)), 1)
        >>> model = MultiClassDeepGP(ClassPairs(3))
        >>> params = model.init(x, hidden_dims=(2,), num_inducing=5)
        >>> model.predict(params, x).shape
        (30, 3)
    """

    mixture_samples: int = 0

    def __post_init__(self):
        if self.mixture_samples < 0:
            raise ValueError(f"mixture_samples must be 0 (the moment predictive) or a number of paths; got "
                             f"{self.mixture_samples}")
        if self.alpha != 1.0:
            raise ValueError(f"a multi-class deep GP takes alpha = 1 only (Θ^α = Θ); got {self.alpha}")
        if not isinstance(self.likelihood, ClassPairs) or self.likelihood.num_classes < 2:
            raise ValueError(f"likelihood must be ClassPairs of at least 2 classes; got {self.likelihood!r}")
        super().__post_init__()  # the deep GP's own checks (quadrature_points)

    @property
    def output_width(self) -> int:
        return self.likelihood.num_classes

    def data_size(self, y):
        """:func:`~pep_gp.core.models.multiclass.rows_per_class` of the labels ``y``: the data's size as
        :meth:`factor_counts` takes it."""
        return rows_per_class(y, self.likelihood.num_classes)

    def factor_counts(self, params: DeepGPParams, class_rows):
        """``[Σ_l G_l]``: ``N(C − 1)`` for every hidden GP (every pair factor touches it), then
        ``n_c = N + (C − 2)N_c`` per class (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1), from the rows
        of each class ``N_c`` (``class_rows`` ``[C]``, ``N = Σ_c N_c``)."""
        classes = self.likelihood.num_classes
        hidden = sum(layer.inducing.shape[0] for layer in params.layers[:-1])
        output = class_factor_counts(class_rows)
        return jnp.concatenate([jnp.full(hidden, jnp.sum(class_rows) * (classes - 1.0), dtype=output.dtype), output])

    def layer_bank(self, layer: LayerParams):
        """The deep GP's, with ``σ_{0,c}`` added to the output GPs' diagonals (``K_uu`` and ``κ``)."""
        gps = super().layer_bank(layer)
        if CLASS_NOISE not in layer.likelihood:
            return gps
        return gps._replace(diagonal=gps.diagonal + ClassPairs.class_noise(layer.likelihood))

    def propagate(self, params: DeepGPParams, inputs, x):
        """Every class's mean and variance ``[B, C]`` at rows ``x`` (:meth:`output_marginals`)."""
        return tuple(self.output_marginals(params, inputs, x))

    def predict(self, params: DeepGPParams, x):
        """``log p(y = c | x)`` ``[B, C]``: eq. (68) on the moments of one forward pass under ``q``."""
        return self.predict_y(params, x)

    def predict_mixture(self, params: DeepGPParams, x, key, samples: int, common_draws: bool = False) -> Mixture:
        """Every class's output GP at ``x`` under ``q`` as the deep GP's Monte Carlo mixture
        (:meth:`~pep_gp.core.models.deep_gp.DeepGP.predict_mixture`, same arguments): ``samples`` paths through
        the hidden layers, and for each path the ``C`` output GPs' Gaussians at its ``h_{L−1}``, each with its
        class's prior mean added. Given a path the classes' ``f_c`` are independent (each has its own ``u_c``),
        so a component is ``Π_c N(f_c; m_{s,c}, v_{s,c})``; means and variances ``[S, B, C]``."""
        return self.output_mixture(params, x, key, samples, common_draws)

    def mixture_log_proba(self, params: DeepGPParams, x, key, samples: int, common_draws: bool = False):
        """``log p(y = c | x)`` ``[B, C]`` under :meth:`predict_mixture`:
        ``log (1/S) Σ_s p(c | m_s, v_s)``, each path's class probabilities by eq. (68) on its component (the
        predictive :meth:`predict` takes of the one forward pass's moments; Villacampa-Calvo & Hernández-Lobato
        2017). Without hidden layers every path is the same Gaussian and this is :meth:`predict`. The paths'
        probabilities are computed one path at a time (the quadrature of eq. 68 holds ``[B, K, C]`` values)."""
        mixture = self.predict_mixture(params, x, key, samples, common_draws)
        class_noise = params.layers[-1].likelihood
        per_path = jax.lax.map(lambda component: self.likelihood.predict(class_noise, *component), mixture)  # [S, B, C]
        return jax.scipy.special.logsumexp(per_path, axis=0) - jnp.log(samples)

    def predict_y_mixture(self, params, x, key, samples, common_draws=False):
        """Refused (and so :meth:`mixture_moments`): a regressor's ``y`` mixture; a class has
        :meth:`mixture_log_proba`."""
        raise NotImplementedError("predict_y_mixture and mixture_moments are a Gaussian output's; a multi-class deep GP "
                                  "gives its classes' probabilities under the mixture with mixture_log_proba")

    def mixture_log_density(self, params: DeepGPParams, x, y, key, samples: int):
        """``log p(y|x)`` per row ``[B]`` at the labels ``y`` ``[B]`` (floats holding integers) under
        :meth:`mixture_log_proba`."""
        log_proba = self.mixture_log_proba(params, x, key, samples)
        return jnp.take_along_axis(log_proba, y.astype(jnp.int32)[:, None], axis=1)[:, 0]


jax.tree_util.register_static(MultiClassDeepGP)
