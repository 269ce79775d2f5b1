"""Held-out metrics as per-block sums (so they reduce over blocks like gradients) and their finish.

Classification: ``test_error`` (fraction misclassified) and ``test_nll`` (mean −log p(y|x)).
Regression: ``rmse`` and ``test_nll`` (mean −log p(y|x) of the model's own predictive: the Gaussian's, or
for a Student-t or count likelihood ``−log ∫ p(y|f) N(f; m, v) df``, a probability mass for counts), both in
the store's target units. Every result also holds ``n_test``.

Calibration (``pep evaluate``, :func:`calibration`, :func:`regression_calibration`) adds sums of the same
kind, so Dask workers and one process give the same report: for classification the Brier score and the
expected calibration error over ``ECE_BINS`` equal-width bins of the top-class probability (per-bin
counts, confidence sums and accuracy sums), for regression the coverage of the central 50/90/95 %
intervals (of the model's own predictive) and the CRPS of the Gaussian predictive.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from ..core import float64
from ..core.gaussian import LOG_2PI

ECE_BINS = 15
ECE_BINNING = f"{ECE_BINS} equal-width bins of the top-class probability: ((b-1)/{ECE_BINS}, b/{ECE_BINS}]"
COVERAGE_LEVELS = (0.5, 0.9, 0.95)


def classification_sums(log_prob_true, correct, mask) -> dict:
    """Per-block sums: rows, errors and −log p(y|x) over the rows with ``mask``."""
    return {"n": jnp.sum(mask), "errors": jnp.sum(jnp.where(mask, ~correct, False)),
            "nll": -jnp.sum(jnp.where(mask, log_prob_true, 0.0))}


def gaussian_log_density(y, mean, var):
    """``log N(y; mean, var)``."""
    return -0.5 * (LOG_2PI + jnp.log(var) + (y - mean) ** 2 / var)


def regression_sums(mean, log_density, y, mask) -> dict:
    """Per-block sums of squared errors ``(y − mean)²`` and of ``−log p(y|x)`` (``log_density``: the
    predictive's, per row) over the rows with ``mask``."""
    residual2 = (y - mean) ** 2
    return {"n": jnp.sum(mask), "squared_error": jnp.sum(jnp.where(mask, residual2, 0.0)),
            "nll": -jnp.sum(jnp.where(mask, log_density, 0.0))}


def classification_calibration_sums(proba, labels, mask) -> dict:
    """Per-block sums of the Brier score and of the reliability bins over the rows with ``mask``.

    ``proba`` is ``[B, C]`` (rows summing to 1), ``labels`` ``[B]`` class indices. The Brier score of a
    row is ``Σ_c (p_c − 1{y = c})²`` (Brier 1950; in [0, 2], twice the binary ``(p_1 − y)²``). A row
    falls in bin ``b`` (1-based) of ``ECE_BINS`` equal-width bins when its top-class probability
    ``max_c p_c`` is in ``((b − 1)/M, b/M]`` (Guo et al. 2017, Sect. 2); each bin sums its rows, their
    top-class probabilities and whether the top class is the label.
    """
    onehot = jax.nn.one_hot(labels, proba.shape[1], dtype=proba.dtype)
    brier = jnp.sum((proba - onehot) ** 2, axis=1)
    confidence = jnp.max(proba, axis=1)
    correct = jnp.argmax(proba, axis=1) == labels
    edges = jnp.linspace(0.0, 1.0, ECE_BINS + 1, dtype=proba.dtype)
    bins = jnp.clip(jnp.searchsorted(edges, confidence, side="left") - 1, 0, ECE_BINS - 1)
    in_bin = (bins[:, None] == jnp.arange(ECE_BINS)) & mask[:, None]  # [B, M]
    return {"brier": jnp.sum(jnp.where(mask, brier, 0.0)),
            "bin_count": jnp.sum(in_bin, axis=0),
            "bin_confidence": jnp.sum(jnp.where(in_bin, confidence[:, None], 0.0), axis=0),
            "bin_accuracy": jnp.sum(in_bin & correct[:, None], axis=0)}


def gaussian_crps(mean, std, y):
    """CRPS of ``N(mean, std²)`` at ``y``: ``σ [z (2Φ(z) − 1) + 2φ(z) − 1/√π]`` with ``z = (y − μ)/σ``,
    the closed form of ``∫ (F(x) − 1{x ≥ y})² dx`` (Gneiting & Raftery 2007, Sect. 4.2, who state it
    with the opposite sign as a positively oriented score). Lower is better; in target units."""
    z = (y - mean) / std
    density = jnp.exp(-0.5 * z**2) / jnp.sqrt(2 * jnp.pi)
    return std * (z * (2 * ndtr(z) - 1) + 2 * density - 1 / jnp.sqrt(jnp.pi))


def regression_calibration_sums(mean, var, y, mask, cdf=None) -> dict:
    """Per-block sums of the Gaussian CRPS (:func:`gaussian_crps`) and of the rows inside each central
    interval of level ``p`` in ``COVERAGE_LEVELS`` (between the predictive's ``(1 − p)/2`` and ``(1 + p)/2``
    quantiles), over the rows with ``mask``. A row is inside when ``P(Y ≤ y) ≥ (1 − p)/2`` and
    ``P(Y < y) ≤ (1 + p)/2``, from ``cdf = (P(Y < y), P(Y ≤ y))`` where the predictive is not the Gaussian
    (:meth:`~pep_gp.core.likelihoods.QuadratureLikelihood.predictive_cdf`), else ``Φ((y − mean)/σ)``: the
    interval ``mean ± z_{(1+p)/2} σ``."""
    std = jnp.sqrt(var)
    if cdf is None:
        at = ndtr((y - mean) / std)
        cdf = (at, at)
    below, at = cdf
    levels = jnp.asarray(COVERAGE_LEVELS, dtype=std.dtype)
    inside = (at[:, None] >= (1 - levels) / 2) & (below[:, None] <= (1 + levels) / 2)
    return {"crps": jnp.sum(jnp.where(mask, gaussian_crps(mean, std, y), 0.0)),
            "covered": jnp.sum(inside & mask[:, None], axis=0)}


def finish(sums: Mapping[str, np.ndarray]) -> dict[str, float | int]:
    """Metrics from the summed per-block results of :func:`classification_sums` or
    :func:`regression_sums`, with the calibration report where the sums hold those of
    :func:`classification_calibration_sums` or :func:`regression_calibration_sums`:

    * ``brier`` (mean Brier score), ``ece`` = ``Σ_b (n_b / n) |acc_b − conf_b|`` (Naeini et al. 2015;
      Guo et al. 2017, eq. 3), ``ece_binning`` (the bins, stated) and ``reliability`` (per bin: ``count``,
      mean ``confidence`` and ``accuracy``, NaN in an empty bin);
    * ``crps`` (mean) and ``coverage_50``, ``coverage_90``, ``coverage_95`` (fractions of rows inside the
      central intervals of the predictive).
    """
    n = int(sums["n"])
    if n == 0:
        raise ValueError("no held-out rows to evaluate")
    metrics: dict[str, float | int] = {"n_test": n, "test_nll": float(sums["nll"]) / n}
    if "errors" in sums:
        metrics["test_error"] = float(sums["errors"]) / n
    else:
        metrics["rmse"] = float(np.sqrt(float(sums["squared_error"]) / n))
    if "bin_count" in sums:
        count = np.asarray(sums["bin_count"], dtype=float)
        confidence, accuracy = (np.asarray(sums[key], dtype=float) for key in ("bin_confidence", "bin_accuracy"))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_confidence, mean_accuracy = confidence / count, accuracy / count
        metrics["brier"] = float(sums["brier"]) / n
        metrics["ece"] = float(np.sum(np.abs(accuracy - confidence))) / n  # Σ_b (n_b/n)|acc_b − conf_b|
        metrics["ece_binning"] = ECE_BINNING
        metrics["reliability"] = {"count": count.astype(int).tolist(), "confidence": mean_confidence.tolist(),
                                  "accuracy": mean_accuracy.tolist()}
    if "crps" in sums:
        metrics["crps"] = float(sums["crps"]) / n
        for level, covered in zip(COVERAGE_LEVELS, np.asarray(sums["covered"])):
            metrics[f"coverage_{round(100 * level)}"] = float(covered) / n
    return metrics


def calibration(y, proba) -> dict[str, float | int]:
    """The held-out report of ``pep evaluate`` for in-memory class probabilities: ``n_test``,
    ``test_nll``, ``test_error``, ``brier``, ``ece`` (with ``ece_binning``) and ``reliability`` (see
    :func:`finish`), from the same sums.

    Args:
        y: class indices ``[n]`` (columns of ``proba``).
        proba: class probabilities ``[n, C]``, rows summing to 1.

    Example:
        >>> report = calibration([0, 1], [[0.9, 0.1], [0.25, 0.75]])
        >>> round(report["brier"], 4), round(report["ece"], 4)
        (0.0725, 0.175)
    """
    with float64():
        proba = jnp.asarray(proba, dtype=jnp.float64)
        labels = jnp.asarray(y, dtype=jnp.int32)
        _check_rows(labels, proba)
        mask = jnp.ones(labels.shape, dtype=bool)
        log_true = jnp.log(jnp.take_along_axis(proba, labels[:, None], axis=1)[:, 0])
        sums = {**classification_sums(log_true, jnp.argmax(proba, axis=1) == labels, mask),
                **classification_calibration_sums(proba, labels, mask)}
        return finish(jax.device_get(sums))


def regression_calibration(y, mean, std, log_density=None, cdf=None) -> dict[str, float | int]:
    """The held-out report of ``pep evaluate`` for an in-memory predictive of mean ``mean`` and standard
    deviation ``std`` (noise included, as ``predict(X, return_std=True)`` gives it): ``n_test``, ``test_nll``,
    ``rmse``, ``crps`` and ``coverage_50``/``_90``/``_95`` (see :func:`finish`), from the same sums. The NLL
    is ``−mean(log_density)`` where given (the predictive's ``log p(y|x)`` per row), else that of the
    Gaussian ``N(mean, std²)``; the coverage is from ``cdf = (P(Y < y), P(Y ≤ y))`` per row where given (see
    :func:`regression_calibration_sums`), else the Gaussian's; the CRPS is the Gaussian's.

    Example:
        >>> report = regression_calibration([0.0, 1.0], [0.0, 0.0], [1.0, 1.0])
        >>> report["coverage_50"], report["coverage_90"]
        (0.5, 1.0)
    """
    with float64():
        y, mean, std = (jnp.asarray(a, dtype=jnp.float64) for a in (y, mean, std))
        log_density = (gaussian_log_density(y, mean, std**2) if log_density is None
                       else jnp.asarray(log_density, dtype=jnp.float64))
        cdf = None if cdf is None else tuple(jnp.asarray(c, dtype=jnp.float64) for c in cdf)
        _check_rows(y, mean, std, log_density, *(cdf or ()))
        mask = jnp.ones(y.shape, dtype=bool)
        sums = {**regression_sums(mean, log_density, y, mask), **regression_calibration_sums(mean, std**2, y, mask, cdf)}
        return finish(jax.device_get(sums))


def _check_rows(first, *others) -> None:
    if first.ndim != 1 or any(other.shape[0] != first.shape[0] for other in others):
        raise ValueError(f"expected one row per label: y has shape {first.shape}, the predictions "
                         f"{[other.shape for other in others]}")


def test_error(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Fraction of ``predicted`` labels that differ from ``labels`` (for in-memory baselines)."""
    return float(np.mean(np.asarray(labels) != np.asarray(predicted)))


def test_nll(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean −log of the probability given to the true label; ``probabilities`` is [n, C]."""
    picked = np.asarray(probabilities)[np.arange(len(labels)), np.asarray(labels, dtype=int)]
    return float(-np.mean(np.log(np.clip(picked, np.finfo(float).tiny, None))))


def rmse(targets: np.ndarray, predicted: np.ndarray) -> float:
    """Root mean squared error."""
    return float(np.sqrt(np.mean((np.asarray(targets) - np.asarray(predicted)) ** 2)))
