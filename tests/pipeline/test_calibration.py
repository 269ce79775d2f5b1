"""The calibration report (issue 39, item 2) against independent implementations: ECE and Brier score by
plain NumPy loops, the Gaussian CRPS by numerical integration, interval coverage on Gaussian draws, and
the per-block sums reducing to the report of all rows at once."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from pep_gp.core import float64
from pep_gp.pipeline.data.blocks import TargetScaling
from pep_gp.pipeline.models.predictive import GaussianPredictive
from pep_gp.pipeline.metrics import (calibration, classification_calibration_sums, classification_sums, finish,
                                     gaussian_crps, regression_calibration)


def reference_ece_and_brier(labels, proba, bins=15):
    """ECE over ``bins`` equal-width bins ``(lo, hi]`` of the top-class probability, written out as in
    Guo et al. (2017), and the multi-class Brier score Σ_c (p_c − 1{y = c})² averaged over rows."""
    confidence = proba.max(axis=1)
    correct = proba.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    ece, counts = 0.0, []
    for b in range(bins):
        lo, hi = edges[b], edges[b + 1]
        rows = (confidence > lo) & (confidence <= hi) if b > 0 else confidence <= hi
        counts.append(int(rows.sum()))
        if rows.any():
            ece += rows.mean() * abs(correct[rows].mean() - confidence[rows].mean())
    brier = np.mean([sum((proba[i, c] - (labels[i] == c)) ** 2 for c in range(proba.shape[1]))
                     for i in range(len(labels))])
    return ece, brier, counts


@pytest.mark.heavy
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 200]), classes=st.sampled_from([2, 5]),
       sharpness=st.floats(0.1, 10.0))  # few shapes: each new one compiles
def test_ece_and_brier_match_a_plain_numpy_implementation(seed, n, classes, sharpness):
    rng = np.random.default_rng(seed)
    proba = rng.dirichlet(np.full(classes, sharpness), size=n)
    labels = rng.integers(0, classes, size=n)
    report = calibration(labels, proba)
    ece, brier, counts = reference_ece_and_brier(labels, proba)
    assert report["ece"] == pytest.approx(ece, abs=1e-12)
    assert report["brier"] == pytest.approx(brier, abs=1e-12)
    assert report["reliability"]["count"] == counts
    assert report["n_test"] == n and report["ece_binning"].startswith("15 equal-width bins")
    assert report["test_error"] == pytest.approx(np.mean(proba.argmax(axis=1) != labels))


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_block_sums_reduce_to_the_report_of_all_rows():
    """Two padded blocks summed (as the engine sums them) give the report of the rows at once."""
    rng = np.random.default_rng(0)
    proba, labels = rng.dirichlet(np.ones(3), size=50), rng.integers(0, 3, size=50)
    with float64():
        blocks = []
        for rows in (slice(0, 32), slice(32, 50)):
            p = np.full((32, 3), 1 / 3)
            y = np.zeros(32, dtype=np.int32)
            count = len(proba[rows])
            p[:count], y[:count] = proba[rows], labels[rows]
            mask = jnp.arange(32) < count
            p, y = jnp.asarray(p), jnp.asarray(y)
            log_true = jnp.log(p[jnp.arange(32), y])
            blocks.append({**classification_sums(log_true, jnp.argmax(p, axis=1) == y, mask),
                           **classification_calibration_sums(p, y, mask)})
        summed = jax.device_get(jax.tree_util.tree_map(jnp.add, *blocks))
    by_blocks, at_once = finish(summed), calibration(labels, proba)
    assert by_blocks["reliability"]["count"] == at_once["reliability"]["count"]
    for key in ("n_test", "test_nll", "test_error", "brier", "ece"):
        assert by_blocks[key] == pytest.approx(at_once[key], rel=1e-12)


@pytest.mark.parametrize("mean, std, y", [(0.0, 1.0, 0.3), (2.0, 0.5, -1.0), (-1.0, 3.0, 4.0), (0.5, 0.1, 0.5)])
def test_gaussian_crps_matches_the_integral_of_the_squared_cdf_difference(mean, std, y):
    """CRPS(F, y) = ∫ (F(x) − 1{x ≥ y})² dx, integrated on each side of y."""
    cdf = stats.norm(mean, std).cdf
    below, _ = integrate.quad(lambda x: cdf(x) ** 2, -np.inf, y, epsabs=1e-12)
    above, _ = integrate.quad(lambda x: (1 - cdf(x)) ** 2, y, np.inf, epsabs=1e-12)
    with float64():
        closed = float(gaussian_crps(jnp.float64(mean), jnp.float64(std), jnp.float64(y)))
    assert closed == pytest.approx(below + above, abs=1e-9)


@pytest.mark.heavy
def test_central_intervals_of_a_true_gaussian_predictive_cover_their_level():
    """Rows drawn from the predictive itself: each coverage within 4 binomial standard errors of its level,
    and the mean CRPS is near the expected score E[σ]/√π of a calibrated Gaussian."""
    rng = np.random.default_rng(1)
    n = 20_000
    mean, std = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    report = regression_calibration(rng.normal(mean, std), mean, std)
    for level in (50, 90, 95):
        p = level / 100
        assert abs(report[f"coverage_{level}"] - p) < 4 * np.sqrt(p * (1 - p) / n)
    assert report["crps"] == pytest.approx(np.mean(std) / np.sqrt(np.pi), rel=0.02)
    narrow = regression_calibration(rng.normal(mean, std), mean, std / 2)  # overconfident: under-covers
    assert narrow["coverage_90"] < 0.7


@pytest.mark.heavy
def test_an_estimators_report_maps_its_labels_to_the_columns_of_predict_proba():
    """``calibration_report`` (both mixins) gives :func:`calibration` / :func:`regression_calibration` of
    its predictions; a label it was not fitted on is refused."""
    from pep_gp.pipeline.estimators.fitted import GPClassifierMixin, GPRegressorMixin

    proba = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    classifier = type("Stub", (GPClassifierMixin,), {"classes_": np.array(["no", "yes"]),
                                                     "predict_proba": lambda self, X: proba})()
    same = json.dumps(classifier.calibration_report(None, ["no", "yes", "yes"])) == json.dumps(
        calibration([0, 1, 1], proba))  # NaN in the empty bins: compared as text
    assert same
    with pytest.raises(ValueError, match=r"fitted classes \['no', 'yes'\], got \['maybe'\]"):
        classifier.calibration_report(None, ["no", "maybe", "yes"])
    # a regressor's predictive without its own log_density (a Gaussian): N(0, 4) at every row
    moments = type("Moments", (), {"predict_y": lambda self, params, x: (jnp.zeros(len(x)), jnp.full(len(x), 4.0))})()
    regressor = type("Stub", (GPRegressorMixin,), {
        "_predictive": lambda self: GaussianPredictive(moments, TargetScaling()),
        "_predict_outputs": lambda self, X, predictive, per_row: predictive(None, np.zeros((3, 1)), *per_row)})()
    with float64():
        report = regressor.calibration_report(None, [0.1, -3.0, 2.0])
    assert report == regression_calibration([0.1, -3.0, 2.0], np.zeros(3), np.full(3, 2.0))
