"""Predictive distributions per block: what ``pep predict``, the estimators' ``predict``/``predict_proba``
and the held-out metrics all compute from one function per model (:meth:`ModelSpec.predictive`).

A predictive maps ``(params, x)`` (rows standardised as in training) to a dict of arrays:
``{"log_proba": [B, C]}`` for classification, ``{"mean": [B], "var": [B]}`` in target units (noise
included) for regression. A regression predictive whose distribution is not the Gaussian of that mean and
variance also has ``log_density(params, x, y)``: ``log p(y|x)`` per row, ``y`` in target units
(:func:`log_density`). :class:`HeldOut` turns one into the per-block sums of the held-out metrics
(:mod:`pep_gp.pipeline.metrics`), so that they reduce over blocks like gradients. Predictives are pytrees
(the model static, the target scaling an argument): :func:`apply` compiles once per model and shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtri

from ...core.gaussian import mixture_quantiles
from ..data.blocks import TargetScaling
from ..engine.compilation import every_program_cached, use_compilation_cache
from ..errors import InputError
from ..metrics import (classification_calibration_sums, classification_sums, gaussian_log_density,
                       regression_calibration_sums, regression_sums)


@dataclass(frozen=True)
class BinaryPredictive:
    """A probit classifier: ``p(y = 1 | x) = Φ(m/√(1 + v))`` from the latent ``(m, v) = predict_f(x)``
    (Rasmussen & Williams 2006, eq. 3.80)."""

    model: Any  # predict_f(params, x) -> (mean, var)

    def __call__(self, params, x) -> dict:
        mean, var = self.model.predict_f(params, x)
        z = mean / jnp.sqrt(1.0 + var)
        return {"log_proba": jnp.stack([log_ndtr(-z), log_ndtr(z)], axis=1)}


@dataclass(frozen=True)
class LikelihoodClassPredictive:
    """A classifier of one latent function and any likelihood of its labels: ``log p(y = c | x) =
    log ∫ N(f; m, v) p(c|f) df`` for each label ``c`` (the likelihood's ``n_classes``, else 0 and 1) from the
    latent ``(m, v) = predict_f(x)``, the likelihood's ``log Z̃`` at α = 1 (e.g. by quadrature for the
    logistic, in closed form for the ordinal probit)."""

    model: Any  # predict_f(params, x) -> (mean, var); likelihood; params.likelihood

    def __call__(self, params, x) -> dict:
        mean, var = self.model.predict_f(params, x)
        log_z = [self.model.likelihood.log_tilted(params.likelihood, jnp.full_like(mean, label), mean, var, 1.0)
                 for label in range(getattr(self.model.likelihood, "n_classes", 2))]
        return {"log_proba": jnp.stack(log_z, axis=1)}


@dataclass(frozen=True)
class MultiClassPredictive:
    """A multi-class classifier whose ``predict(params, x)`` gives ``log p(y = c | x)`` ``[B, C]``."""

    model: Any

    def __call__(self, params, x) -> dict:
        return {"log_proba": self.model.predict(params, x)}


@dataclass(frozen=True)
class MixtureClassPredictive:
    """A multi-class deep GP classifier by its Monte Carlo mixture
    (:meth:`~pep_gp.core.models.multiclass_deep_gp.MultiClassDeepGP.mixture_log_proba`): eq. (68) on each of the
    model's ``mixture_samples`` paths through the hidden layers, averaged, from the key of :data:`MIXTURE_SEED` with
    the same draws for every row, so that a row's probabilities do not depend on the rows predicted with it."""

    model: Any  # a MultiClassDeepGP with mixture_samples > 0

    def __call__(self, params, x) -> dict:
        return {"log_proba": self.model.mixture_log_proba(params, x, jax.random.key(MIXTURE_SEED),
                                                          self.model.mixture_samples, common_draws=True)}


@dataclass(frozen=True)
class GaussianPredictive:
    """A regressor: ``predict_y(params, x)`` (mean and variance in model units, noise included) mapped back
    to target units; its quantiles are the Gaussian's, ``mean + std·Φ⁻¹(p)``."""

    model: Any
    targets: TargetScaling

    def __call__(self, params, x) -> dict:
        mean, var = self.model.predict_y(params, x)
        return {"mean": mean * self.targets.scale + self.targets.shift, "var": var * self.targets.scale**2}

    def quantiles(self, params, x, levels):
        """``y``'s predictive quantiles ``[B, Q]`` at the levels ``[B, Q]`` of each row, in target units."""
        out = self(params, x)
        return out["mean"][:, None] + jnp.sqrt(out["var"])[:, None] * ndtri(levels)


MIXTURE_COMPONENTS = 256
"""Components of the deep GP's Monte Carlo mixture predictive behind its quantiles (``S`` paths per row)."""

MIXTURE_SEED = 0
"""The key, ``jax.random.key(MIXTURE_SEED)``, of every Monte Carlo mixture predictive (a deep regressor's quantiles, a
multi-class deep GP's mixture probabilities): a run predicts the same bits in every process."""


@dataclass(frozen=True)
class MixturePredictive(GaussianPredictive):
    """A deep GP regressor: mean and variance of its moment-matched forward pass (Bui et al. 2016, §7), as
    :class:`GaussianPredictive`, and the quantiles of its non-Gaussian predictive, the mixture of
    :meth:`~pep_gp.core.models.deep_gp.DeepGP.predict_y_mixture` (:data:`MIXTURE_COMPONENTS` components from
    the key of :data:`MIXTURE_SEED`, the same draws for every row, so that a row's quantiles do not depend on the
    rows predicted with it)."""

    def quantiles(self, params, x, levels):
        mixture = self.model.predict_y_mixture(params, x, jax.random.key(MIXTURE_SEED), MIXTURE_COMPONENTS,
                                               common_draws=True)
        return mixture_quantiles(mixture.mean * self.targets.scale + self.targets.shift,
                                 jnp.sqrt(mixture.var) * self.targets.scale, levels)


@dataclass(frozen=True)
class LikelihoodPredictive(GaussianPredictive):
    """A regressor of a non-Gaussian likelihood (Student-t, counts): the moments of ``predict_y`` as
    :class:`GaussianPredictive`, and the quantiles of ``∫ p(y|f) N(f; m, v) df`` by the likelihood's own
    ``quantiles`` (quadrature over ``f`` and Newton's method on the CDF; bisection to integers for counts)."""

    def latents(self, params, x):
        """The latent moments the likelihood takes: ``predict_f``'s mean and variance."""
        return self.model.predict_f(params, x)

    def quantiles(self, params, x, levels):
        mean, var = self.latents(params, x)
        values = self.model.likelihood.quantiles(params.likelihood, mean, var, levels)
        return values * self.targets.scale + self.targets.shift

    def log_density(self, params, x, y):
        """``log p(y|x) = log ∫ p(y|f) N(f; m, v) df − log scale`` per row (``y`` in target units): the
        likelihood's ``log Z̃`` at α = 1 (Bui, Yan & Turner 2017 eq. 118; by its quadrature), in the model's
        units less the log of the targets' scale (1 for counts, whose predictive is a probability mass)."""
        mean, var, y = self._in_model_units(params, x, y)
        return (self.model.likelihood.log_tilted(params.likelihood, y, mean, var, 1.0)
                - jnp.log(jnp.asarray(self.targets.scale, dtype=mean.dtype)))

    def cdf(self, params, x, y):
        """``(P(Y < y), P(Y ≤ y))`` per row (``y`` in target units) under ``∫ p(y|f) N(f; m, v) df``
        (:meth:`~pep_gp.core.likelihoods.QuadratureLikelihood.predictive_cdf`)."""
        mean, var, y = self._in_model_units(params, x, y)
        return self.model.likelihood.predictive_cdf(params.likelihood, y, mean, var)

    def _in_model_units(self, params, x, y):
        """The latent mean and variance at ``x`` and the targets ``y`` (target units) in the model's units."""
        mean, var = self.latents(params, x)
        return mean, var, (y - self.targets.shift) / self.targets.scale


@dataclass(frozen=True)
class HeteroscedasticPredictive(LikelihoodPredictive):
    """A regressor of two latent functions, the mean and the log noise variance
    (:class:`~pep_gp.core.models.heteroscedastic.HeteroscedasticSparseGP`): as :class:`LikelihoodPredictive`,
    from both latents' moments ``[B, 2]`` (``predict_latents``); its density, CDF and quantiles are those of
    the scale mixture ``∫ N(y; m_f, v_f + σ₀² e^g) N(g; m_g, v_g) dg``."""

    def latents(self, params, x):
        return self.model.predict_latents(params, x)


def log_density(predictive: Callable, params, x, y, out: dict):
    """``log p(y|x)`` ``[B]`` of a regression predictive at the targets ``y`` ``[B]`` (target units), given its
    outputs ``out = predictive(params, x)``: its own ``log_density`` where it has one (a non-Gaussian
    likelihood), else the Gaussian's ``log N(y; mean, var)``. The held-out NLL of training, ``pep evaluate``
    and the estimators' ``calibration_report`` all come from here."""
    own = getattr(predictive, "log_density", None)
    return own(params, x, y) if own is not None else gaussian_log_density(y, out["mean"], out["var"])


def interval_cdf(predictive: Callable, params, x, y):
    """A regression predictive's ``(P(Y < y), P(Y ≤ y))`` ``[B]`` each at the targets ``y`` (target units), by
    which the calibration report counts the rows inside its central intervals: its own ``cdf`` where it has
    one (a non-Gaussian likelihood), else None (the Gaussian's:
    :func:`~pep_gp.pipeline.metrics.regression_calibration_sums`)."""
    own = getattr(predictive, "cdf", None)
    return None if own is None else own(params, x, y)


@dataclass(frozen=True)
class Scored:
    """A regression predictive's outputs, ``{"log_density": [B]}`` at per-row targets ``y`` and, where the
    predictive has its own, ``{"cdf_below", "cdf"}`` (``P(Y < y)``, ``P(Y ≤ y)``), as a predictive of
    ``(params, x, y)`` (:func:`log_density`, :func:`interval_cdf`)."""

    predictive: Any

    def __call__(self, params, x, y) -> dict:
        out = self.predictive(params, x)
        cdf = interval_cdf(self.predictive, params, x, y)
        return out | {"log_density": log_density(self.predictive, params, x, y, out)} | (
            {} if cdf is None else {"cdf_below": cdf[0], "cdf": cdf[1]})


@dataclass(frozen=True)
class Quantiles:
    """A regressor's predictive quantiles as a predictive of ``(params, x, levels)``: ``{"quantiles": [B, Q]}``."""

    predictive: Any  # a GaussianPredictive

    def __call__(self, params, x, levels) -> dict:
        return {"quantiles": self.predictive.quantiles(params, x, levels)}


@dataclass(frozen=True)
class Latent:
    """The latent moments of a model's ``predict_f(params, x, full_cov)`` in model units: ``{"mean", "var"}``
    (``[B]`` each, ``[B, C]`` for a multi-class model) or, with ``full_cov``, ``{"mean", "cov"}`` (``[B, B]``,
    ``[C, B, B]``)."""

    model: Any
    full_cov: bool = False

    def __call__(self, params, x) -> dict:
        mean, spread = self.model.predict_f(params, x, full_cov=self.full_cov)
        return {"mean": mean, "cov" if self.full_cov else "var": spread}


for _cls, _data in ((BinaryPredictive, []), (LikelihoodClassPredictive, []), (MultiClassPredictive, []), (MixtureClassPredictive, []),
                    (GaussianPredictive, ["targets"]),
                    (MixturePredictive, ["targets"]), (LikelihoodPredictive, ["targets"]),
                    (HeteroscedasticPredictive, ["targets"])):
    jax.tree_util.register_dataclass(_cls, data_fields=_data, meta_fields=["model"])
jax.tree_util.register_dataclass(Latent, data_fields=[], meta_fields=["model", "full_cov"])
for _wrapper in (Quantiles, Scored):
    jax.tree_util.register_dataclass(_wrapper, data_fields=["predictive"], meta_fields=[])


@jax.jit
def apply(predictive: Callable, params, x, *rows) -> dict:
    """``predictive(params, x, *rows)`` (``rows``: per-row inputs besides ``x``), compiled once per model (and
    shape), whatever its target scaling."""
    return predictive(params, x, *rows)


@dataclass(frozen=True)
class HeldOut:
    """Per-block held-out sums of a predictive on labelled rows (``y`` in model units, as in blocks):
    −log p(y|x) and errors (classification), squared errors and −log p(y|x) of the predictive's own density
    (regression, :func:`log_density`); with ``calibration``, also those of the calibration report (``pep
    evaluate``): Brier score and reliability bins, or CRPS and interval coverage. A predictive of ``P`` targets
    per row (``mean`` ``[B, P]``: the multi-output regressor's) is scored by :func:`over_outputs`."""

    predictive: Callable
    targets: TargetScaling
    calibration: bool = False

    def __call__(self, params, x, y, mask):
        out = self.predictive(params, x)
        if "log_proba" in out:
            labels = y.astype(jnp.int32)
            log_true = jnp.take_along_axis(out["log_proba"], labels[:, None], axis=1)[:, 0]
            sums = classification_sums(log_true, jnp.argmax(out["log_proba"], axis=1) == labels, mask)
            if self.calibration:
                sums |= classification_calibration_sums(jax.nn.softmax(out["log_proba"], axis=1), labels, mask)
            return sums
        if out["mean"].ndim == 2:
            return over_outputs(out, y, mask, self.targets, self.calibration)
        y = y * self.targets.scale + self.targets.shift
        sums = regression_sums(out["mean"], log_density(self.predictive, params, x, y, out), y, mask)
        if self.calibration:
            sums |= regression_calibration_sums(out["mean"], out["var"], y, mask,
                                                interval_cdf(self.predictive, params, x, y))
        return sums


def over_outputs(out: dict, y, mask, targets: TargetScaling, calibration: bool = False) -> dict:
    """Held-out sums of a Gaussian predictive of ``P`` targets per row (``out``'s ``mean`` and ``var``
    ``[B, P]`` in target units, ``y`` ``[B, P]`` in model units: ``(y − shift)/scale`` of ``targets``, ``P``
    numbers each), each averaged over the outputs: every metric of :func:`~pep_gp.pipeline.metrics.finish`
    (``rmse``, ``test_nll``, ``crps``, coverage) is then the mean over the rows and the outputs of the
    one-output metric of each output's marginal predictive, ``test_nll`` the row's ``−log p(y_p|x)``
    averaged over ``p`` (not the joint density of the LMC's correlated outputs), ``n_test`` the rows."""
    mean, var = out["mean"], out["var"]
    outputs = mean.shape[1]
    y = y.reshape(mean.shape) * jnp.asarray(targets.scale) + jnp.asarray(targets.shift)
    rows = jnp.repeat(mask, outputs)
    flat = [a.reshape(-1) for a in (mean, var, y)]
    sums = regression_sums(flat[0], gaussian_log_density(flat[2], flat[0], flat[1]), flat[2], rows)
    if calibration:
        sums |= regression_calibration_sums(*flat, rows)
    return {key: jnp.sum(mask) if key == "n" else value / outputs for key, value in sums.items()}


def check_quantiles(levels) -> tuple[float, ...]:
    """Quantile levels, each in (0, 1), at least one.

    Raises:
        InputError: none, or a level out of range (named ``--quantiles``).
    """
    levels = tuple(float(level) for level in levels)
    if not levels:
        raise InputError("--quantiles: expected at least one level, e.g. 0.05,0.5,0.95")
    for level in levels:
        if not 0 < level < 1:
            raise InputError(f"--quantiles: expected levels in (0, 1) such as 0.05,0.5,0.95, found {level:g}")
    return levels


def class_probabilities(log_proba: np.ndarray) -> np.ndarray:
    """``p_c = exp(l_c − log Σ_k exp l_k)``: probabilities from (possibly unnormalised) log-probabilities
    ``[n, C]``, each row summing to 1 in float64."""
    top = log_proba.max(axis=1, keepdims=True)
    weights = np.exp(log_proba - top)
    return weights / weights.sum(axis=1, keepdims=True)


@every_program_cached()
def predict_in_blocks(predictive: Callable, params, x: np.ndarray, block_rows: int,
                      *row_inputs: np.ndarray) -> dict[str, np.ndarray]:
    """The predictive's outputs for the standardised rows ``x`` ``[n, D]`` (and the per-row inputs
    ``row_inputs``, ``[n, …]`` each, e.g. quantile levels): blocks of ``block_rows`` rows, the last padded
    (with zeros; a row input with its first row), so every call compiles one shape, and a row's outputs do
    not depend on how many rows came with it (``pep predict`` and the estimators give the same bits). A
    process that only predicts (``pep predict``, a loaded model) loads the program from the persistent
    compilation cache when one is configured (:mod:`pep_gp.pipeline.engine.compilation`)."""
    use_compilation_cache()
    parts = []
    for start in range(0, x.shape[0], block_rows):
        rows = x[start:start + block_rows]
        block = np.zeros((block_rows, x.shape[1]))
        block[:len(rows)] = rows
        extra = [np.concatenate([a[start:start + block_rows],
                                 np.repeat(a[:1], block_rows - len(rows), axis=0)]) for a in row_inputs]
        out = jax.device_get(apply(predictive, params, block, *extra))
        parts.append({key: np.asarray(value)[:len(rows)] for key, value in out.items()})
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]} if parts else {}
