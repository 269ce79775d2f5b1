"""How well can the multi-class paper's likelihood do on Chile? Linear models fitted by maximum likelihood
on the three stratified Chile splits of :mod:`benchmarks.bench_estimators`, scored by test NLL:

* logistic regression (softmax; scikit-learn, as the estimators' baseline);
* multinomial probit, ``p(y = c | x) = P(f_c + ε_c > f_k + ε_k ∀k)`` with ``f = Wᵀ[1, x]`` and unit Gaussian
  noise — the likelihood of Villacampa-Calvo & Hernández-Lobato (2017, eq. 5), computed by pep's own
  predictive (eq. 68, :func:`pep_gp.core.models.multiclass_sites.predictive_log_probs`);
* the same model fitted to the product of its pairwise probits ``Π_{k≠y} Φ((f_y − f_k)/√2)`` (eq. 6, the
  approximation EP trains on), then scored with the exact predictive.

A GP with a linear kernel can at best match the second (its latent functions are linear), so the gap
between it and logistic regression is what pep's multi-class model can close on Chile with any kernel that
finds no structure beyond linear.

Usage:  OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_chile_probit
Writes: benchmarks/results/bench_chile_probit.json
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm
from sklearn.preprocessing import StandardScaler

from benchmarks._common import arguments, standard_error, write_results
from benchmarks.bench_estimators import _classification_baseline, _table
from pep_gp.core import float64
from pep_gp.core.models.multiclass_sites import predictive_log_probs

NAME = "bench_chile_probit"
BASELINE = "logistic regression"
FITS = {"multinomial probit": "exact", "multinomial probit, pairwise fit": "pairwise"}  # name → objective
_predictive = jax.jit(lambda latent: predictive_log_probs(latent, jnp.ones_like(latent)))


def exact_log_probs(latent: np.ndarray) -> np.ndarray:
    """``log P(f_c + ε_c is the largest)`` ``[N, C]`` for unit-variance noise: pep's predictive (eq. 68) with
    the latent values as means and unit variances."""
    with float64():
        return np.asarray(_predictive(jnp.asarray(latent, jnp.float64)))


def pairwise_log_likelihood(latent: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``Σ_{k≠y} log Φ((f_y − f_k)/√2)`` per row: eq. (6)'s product with the noise integrated pair by pair."""
    rows = np.arange(y.size)
    log_cdf = norm.logcdf((latent[rows, y][:, None] - latent) / np.sqrt(2))
    log_cdf[rows, y] = 0.0
    return log_cdf.sum(1)


def fit_probit(x: np.ndarray, y: np.ndarray, objective: str) -> np.ndarray:
    """Weights ``[1 + D, C]`` (class 0's fixed at zero) maximising the exact or the pairwise likelihood."""
    features, classes = x.shape[1] + 1, int(y.max()) + 1
    design = np.c_[np.ones(len(x)), x]

    def weights(flat):
        return np.c_[np.zeros(features), flat.reshape(features, classes - 1)]

    def loss(flat):
        latent = design @ weights(flat)
        if objective == "exact":
            return -exact_log_probs(latent)[np.arange(y.size), y].mean()
        return -pairwise_log_likelihood(latent, y).mean()

    return weights(minimize(loss, np.zeros(features * (classes - 1)), method="L-BFGS-B").x)


def run(splits: int = 3) -> dict:
    per_split = {fit: [] for fit in (BASELINE, *FITS)}
    for x_train, y_train, x_test, y_test in _table("chile", splits):
        per_split[BASELINE].append(_classification_baseline(x_train, y_train, x_test, y_test))
        scaler = StandardScaler().fit(x_train)
        design = np.c_[np.ones(len(x_test)), scaler.transform(x_test)]
        for fit, objective in FITS.items():
            log_probs = exact_log_probs(design @ fit_probit(scaler.transform(x_train), y_train, objective))
            per_split[fit].append(float(-log_probs[np.arange(y_test.size), y_test].mean()))
    baseline = np.asarray(per_split[BASELINE])
    return {"splits": splits, "test_nll": per_split,
            "summary": {fit: {"test_nll": float(np.mean(values)), "minus_logistic": float(np.mean(np.subtract(values, baseline))),
                              "minus_logistic_se": standard_error(np.subtract(values, baseline))}
                        for fit, values in per_split.items()}}


def table(result: dict) -> str:
    """Markdown: each linear fit's test NLL and its paired difference to logistic regression."""
    lines = ["| linear model, fitted by maximum likelihood | test NLL per split | mean | minus logistic regression (paired) |",
             "|---|---|---|---|"]
    for fit, row in result["summary"].items():
        splits = " / ".join(f"{v:.4f}" for v in result["test_nll"][fit])
        versus = "–" if fit == BASELINE else f"{row['minus_logistic']:+.4f} ± {row['minus_logistic_se']:.4f}"
        lines.append(f"| {fit} | {splits} | {row['test_nll']:.4f} | {versus} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_chile_probit``."""
    return arguments(__doc__, splits=3)


def main(argv=None) -> None:
    result = run(cli().parse_args(argv).splits)
    write_results(NAME, result)
    print(table(result))


if __name__ == "__main__":
    main()
