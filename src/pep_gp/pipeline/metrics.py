"""Held-out metrics as per-block sums (so they reduce over blocks like gradients) and their finish.

Classification: ``test_error`` (fraction misclassified) and ``test_nll`` (mean −log p(y|x)).
Regression: ``rmse`` and ``test_nll`` (mean Gaussian predictive −log p(y|x)), both in the store's
target units. Every result also holds ``n_test``.
"""

from __future__ import annotations

from typing import Mapping

import jax.numpy as jnp
import numpy as np

from ..core.gaussian import LOG_2PI


def classification_sums(log_prob_true, correct, mask) -> dict:
    """Per-block sums: rows, errors and −log p(y|x) over the rows with ``mask``."""
    return {"n": jnp.sum(mask), "errors": jnp.sum(jnp.where(mask, ~correct, False)),
            "nll": -jnp.sum(jnp.where(mask, log_prob_true, 0.0))}


def regression_sums(mean, var, y, mask) -> dict:
    """Per-block sums of squared errors and Gaussian −log N(y; mean, var) over the rows with ``mask``."""
    residual2 = (y - mean) ** 2
    nll = 0.5 * (LOG_2PI + jnp.log(var) + residual2 / var)
    return {"n": jnp.sum(mask), "squared_error": jnp.sum(jnp.where(mask, residual2, 0.0)),
            "nll": jnp.sum(jnp.where(mask, nll, 0.0))}


def finish(sums: Mapping[str, np.ndarray]) -> dict[str, float | int]:
    """Metrics from the summed per-block results of :func:`classification_sums` or
    :func:`regression_sums`."""
    n = int(sums["n"])
    if n == 0:
        raise ValueError("no held-out rows to evaluate")
    metrics: dict[str, float | int] = {"n_test": n, "test_nll": float(sums["nll"]) / n}
    if "errors" in sums:
        metrics["test_error"] = float(sums["errors"]) / n
    else:
        metrics["rmse"] = float(np.sqrt(float(sums["squared_error"]) / n))
    return metrics


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
