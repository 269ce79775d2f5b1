"""The held-out NLL of a non-Gaussian regressor is that of its own predictive density (issue 39, item 1):
``−log ∫ p(y|f) N(f; m, v) df`` (a probability mass for counts), the same in the trainer's metrics, ``pep
evaluate`` and an estimator's ``calibration_report``, checked against an independent ``scipy.integrate.quad``;
and the report's interval coverage is that of the model's own predictive (its CDF by quadrature here; the
rows inside ``predict_quantiles``' intervals for counts). With a Student-t of ν ≤ 2
(infinite predictive variance) the Gaussian of the moments gave an infinite NLL and covered every row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, special, stats

import pep_gp
from pep_gp import SparseGPRegressor
from pep_gp.pipeline.runs.predict import predict
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.runs.run import evaluate
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.fits import fit


def gaussian_expectation_by_quad(g, mean, var, marks=(), epsabs=0.0, epsrel=1e-13) -> float:
    """``∫ g(f) N(f; m, v) df`` by adaptive quadrature over ``m ± 30√v``, split at ``m`` and ``marks`` (where
    ``g`` peaks or steps)."""
    sd = math.sqrt(var)
    low, high = mean - 30 * sd, mean + 30 * sd
    points = sorted({mean, *(p for p in marks if low < p < high)})
    pdf = stats.norm(mean, sd)
    value, _ = integrate.quad(lambda f: g(f) * pdf.pdf(f), low, high, points=points, epsabs=epsabs, epsrel=epsrel,
                              limit=1000)
    return value


def log_predictive_by_quad(log_likelihood, y, mean, var, marks=()) -> float:
    """``log ∫ p(y|f) N(f; m, v) df`` (``marks``: where ``p(y|f)`` peaks)."""
    return math.log(gaussian_expectation_by_quad(lambda f: math.exp(log_likelihood(y, f)), mean, var, marks))


def student_t_log_predictive(y, mean, var, scale, dof) -> np.ndarray:
    """Per row, with the Student-t log density written out (as ``scipy.stats.t(dof, f, scale).logpdf``, faster)."""
    constant = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi) - math.log(scale)
    at_half_scale = constant - 0.5 * (dof + 1) * math.log1p(0.25 / dof)
    assert at_half_scale == pytest.approx(stats.t(dof, 0.0, scale).logpdf(0.5 * scale), rel=1e-14)

    def log_t(y_, f):
        return constant - 0.5 * (dof + 1) * math.log1p(((y_ - f) / scale) ** 2 / dof)

    return np.array([log_predictive_by_quad(log_t, *row, marks=[row[0] + k * scale for k in (-5, 0, 5)])
                     for row in zip(y, mean, var)])


CDF_PRECISION = 2e-3
"""How far the model's Student-t predictive CDF (Gauss–Hermite over f) may be from adaptive quadrature's here."""


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_trainer_and_pep_evaluate_score_a_student_t_run_by_its_own_density(regression_store, tmp_path):
    """ν = 1.5, held: the held-out NLL of the trainer's last evaluation and of ``pep evaluate`` equal the mean
    of the quadrature over the store's 100 test rows to 1e-8; the moments' Gaussian gives ∞ here."""
    config = TrainConfig(model={"num_inducing": 6, "likelihood": "student-t", "dof": 1.5, "train_dof": False},
                         max_steps=3, batch_size=1000)
    result = train(TrainJob("sparse-gp-regressor", regression_store, config, tmp_path / "run"))
    loaded = pep_gp.load(tmp_path / "run")
    x, y = (np.asarray(a[:], dtype=np.float64) for a in regression_store.arrays("test"))  # stored as float32
    x = x + regression_store.transforms.offsets  # the features as a user gives them to the estimator
    mean, var = loaded.predict_f(x)
    scale, dof = (float(v) for v in loaded.model_.likelihood.scale_and_dof(loaded.params_.likelihood))
    assert dof == pytest.approx(1.5, rel=1e-12) and np.all(np.isinf(loaded.predict(x, return_std=True)[1]))
    expected = -np.mean(student_t_log_predictive(y, mean, var, scale * loaded.targets_.scale, dof))
    trained = result.history[-1]
    assert trained["n_test"] == len(y) == 100
    assert trained["test_nll"] == pytest.approx(expected, rel=1e-8)
    evaluated, report = evaluate(tmp_path / "run"), loaded.calibration_report(x, y)
    assert evaluated["test_nll"] == pytest.approx(expected, rel=1e-8)
    assert report["test_nll"] == pytest.approx(expected, rel=1e-8)
    # the rows inside the central interval: P(Y ≤ y) between (1 − p)/2 and (1 + p)/2, here by quadrature of the
    # Student-t CDF (the Gaussian's interval held every row)
    t_scale = scale * loaded.targets_.scale
    below = np.array([gaussian_expectation_by_quad(lambda f: special.stdtr(dof, (y_ - f) / t_scale), m, v, marks=[y_],
                                                   epsabs=1e-13, epsrel=1e-12) for y_, m, v in zip(y, mean, var)])
    # pep's CDF is Gauss–Hermite over f (within 7e-4 here, below): a row that close to an end may fall either side
    for level in (50, 90, 95):
        ends = np.array([0.5 - level / 200, 0.5 + level / 200])
        inside = np.mean((below >= ends[0]) & (below <= ends[1]))
        borderline = np.mean(np.min(np.abs(below[:, None] - ends), axis=1) < CDF_PRECISION)
        assert evaluated[f"coverage_{level}"] == report[f"coverage_{level}"]
        assert abs(report[f"coverage_{level}"] - inside) <= borderline + 1e-12 and borderline <= 0.03
    assert report["coverage_50"] < 0.9
    # pep predict --interval 0.9: the predictive's own 5 % and 95 % quantiles (the Gaussian's were ±∞ here), at
    # the first ten test rows: P(Y ≤ lower) = 0.05 and P(Y ≤ upper) = 0.95 by adaptive quadrature, to the
    # precision of the model's CDF (Gauss–Hermite over f: within 7e-4 here)
    predict(tmp_path / "run", regression_store.path, tmp_path / "p.parquet", intervals=(0.9,), split="test")
    ends = pd.read_parquet(tmp_path / "p.parquet")[["lower_0.9", "upper_0.9"]].to_numpy()[:10]
    cdf = [[gaussian_expectation_by_quad(lambda f: special.stdtr(dof, (end - f) / t_scale), m, v, marks=[end],
                                         epsabs=1e-13, epsrel=1e-12) for end in row]
           for row, m, v in zip(ends, mean, var)]
    np.testing.assert_allclose(cdf, np.broadcast_to([0.05, 0.95], (10, 2)), rtol=0, atol=CDF_PRECISION)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("likelihood", ["poisson", "negative-binomial"])
def test_a_count_regressors_report_gives_its_predictive_probability_mass(likelihood):
    """At five rows with counts 0 to 20, ``calibration_report``'s NLL is the mean of ``−log ∫ p(y|f) N(f; m, v)
    df`` with ``p`` the Poisson or negative-binomial mass of ``e^f``, by quadrature (1e-8); a ``y`` of
    another length is refused naming both."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (40, 1))
    counts = rng.poisson(np.exp(1.0 + np.sin(2 * x[:, 0])))
    model = fit(SparseGPRegressor(likelihood=likelihood, num_inducing=6, max_iter=5), x, counts)
    rows, y = x[:5], np.array([0.0, 1.0, 3.0, 7.0, 20.0])
    mean, var = model.predict_f(rows)
    if likelihood == "poisson":
        pmf = lambda k, f: stats.poisson.logpmf(k, math.exp(f))  # noqa: E731
    else:
        r = float(model.model_.likelihood.dispersion(model.params_.likelihood))
        pmf = lambda k, f: stats.nbinom.logpmf(k, r, r / (r + math.exp(f)))  # noqa: E731
    expected = [log_predictive_by_quad(pmf, *row, marks=[math.log(row[0] + 0.5)]) for row in zip(y, mean, var)]
    report = model.calibration_report(rows, y)
    assert report["n_test"] == 5
    assert report["test_nll"] == pytest.approx(-np.mean(expected), rel=1e-8)
    held_out = model.calibration_report(x, counts)  # coverage: the rows inside predict_quantiles' interval
    low, high = model.predict_quantiles(x, (0.05, 0.95)).T
    assert held_out["coverage_90"] == np.mean((counts >= low) & (counts <= high))
    with pytest.raises(ValueError, match=r"expected one value per row of X \(5\), got 4"):
        model.calibration_report(rows, y[:4])
