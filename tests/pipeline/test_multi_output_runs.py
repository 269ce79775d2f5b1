"""The runs of ``pep train --model multi-output-regressor``: their held-out metrics average each output's, their
predictions have a column per target, and the options of one target's predictive are refused (a run trained,
predicted and loaded: tests/pipeline/test_multi_target_stores.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.stats

from pep_gp.pipeline.data.blocks import TargetScaling
from pep_gp.pipeline.data.transforms import NumericFeature, Transforms
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.metrics import COVERAGE_LEVELS, finish
from pep_gp.pipeline.models.predictive import over_outputs
from pep_gp.pipeline.runs.predict import Outputs, check_outputs, prediction_columns
from tests.tiny import FEATURES

TWO_TARGETS = Transforms(features=tuple(NumericFeature(column=f"x{j}") for j in range(FEATURES)), labels=None,
                         na="fail", target=("t1", "t2"), task="regression")


def test_held_out_metrics_of_several_targets_average_each_outputs():
    """RMSE, NLL, CRPS (Gneiting & Raftery 2007, Sect. 4.2, in closed form) and coverage from scipy's normal over
    every (row, output) value of the unmasked rows; ``n_test`` counts rows."""
    rng = np.random.default_rng(0)
    mean, y = rng.normal(size=(7, 2)) * [1.0, 3.0] + [0.0, 5.0], rng.normal(size=(7, 2)) * [1.0, 3.0] + [0.0, 5.0]
    var = rng.uniform(0.5, 4.0, size=(7, 2))
    mask = np.array([True] * 6 + [False])
    targets = TargetScaling((0.5, 5.0), (2.0, 3.0))
    sums = jax.jit(over_outputs, static_argnums=4)({"mean": mean, "var": var}, targets(y), mask, targets, True)
    metrics = finish(jax.device_get(sums))
    std = np.sqrt(var[mask])
    z = (y - mean)[mask] / std
    norm = scipy.stats.norm
    assert metrics["n_test"] == 6
    np.testing.assert_allclose(metrics["rmse"], np.sqrt(np.mean((z * std) ** 2)), rtol=1e-13)
    np.testing.assert_allclose(metrics["test_nll"], -np.mean(norm.logpdf(z) - np.log(std)), rtol=1e-13)
    crps = std * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    np.testing.assert_allclose(metrics["crps"], np.mean(crps), rtol=1e-13)
    for level in COVERAGE_LEVELS:
        inside = np.abs(z) <= norm.ppf((1 + level) / 2)
        assert metrics[f"coverage_{round(100 * level)}"] == pytest.approx(np.mean(inside), abs=1e-15)


def test_a_multi_output_runs_columns_are_each_targets_mean_and_deviation():
    assert prediction_columns(TWO_TARGETS, per_target=True) == ["mean_t1", "mean_t2", "std_t1", "std_t2"]


@pytest.mark.parametrize("outputs, option", [(Outputs(intervals=(0.9,)), "--interval"), (Outputs(latent=True), "--latent"),
                                             (Outputs(quantiles=(0.5,)), "--quantiles"), (Outputs(samples=3), "--samples")])
def test_a_multi_output_run_refuses_the_options_of_one_targets_predictive(outputs, option):
    with pytest.raises(InputError, match=rf"^{option}: not available for a multi-output run \(it predicts each "
                                         r"target's mean_<target> and std_<target>; .*return_cov=True"):
        check_outputs(outputs, "regression", per_target=True)
