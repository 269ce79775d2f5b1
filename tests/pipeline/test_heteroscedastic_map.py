"""Priors and a mean function in ``HeteroscedasticGPRegressor`` / ``--model sparse-gp-heteroscedastic`` (issue 65):
a linear mean recovers a linear trend's slope under a noise that grows with ``x``, predictions far from the data
revert to the fitted mean, ``mean_function_`` is reported in the data's units, and a saved run keeps its priors and
mean and predicts the same (``pep_gp.load`` and ``pep predict``); the ``[model]`` tables and ``--set`` give them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pep_gp
from pep_gp import HeteroscedasticGPRegressor
from pep_gp.kernels import SquaredExponential
from pep_gp.means import Linear
from pep_gp.pipeline.models import model_settings
from pep_gp.pipeline.models.heteroscedastic import HETEROSCEDASTIC
from pep_gp.pipeline.models.protocol import settings_kernel, settings_mean
from pep_gp.pipeline.runs.config import load_config, parse_settings
from pep_gp.pipeline.runs.predict import predict
from pep_gp.priors import Gamma, HalfNormal
from tests import oracles
from tests.fits import fit

SLOPE, INTERCEPT = 3.0, 5.0


@pytest.mark.heavy  # a fit of 80 rows, a save, a load and pep predict: ~30 s on 2 shared cores
def test_a_linear_mean_recovers_the_slope_reverts_far_away_and_a_saved_run_predicts_the_same(tmp_path):
    """``y = 3x + 5 + g(x) + σ(x)ε`` on ``[0, 6]``, ``g`` a small SE GP (variance 0.09, lengthscale 1) and the noise
    deviation ``σ(x) = 0.05 + 0.1x``: the fitted slope lies within 4 standard errors of 3, the generalised
    least-squares error ``√[(XᵀC⁻¹X)⁻¹]_aa`` under the generating covariance ``C = K + diag σ²`` (Rasmussen &
    Williams 2006, §2.7: the best any estimator of the trend can do); at ``x = ±200`` the predictive mean is
    ``mean_function_`` (the GP reverts to its prior mean, 1e-6); the saved run's ``pep_gp.load`` and
    ``pep predict`` give the estimator's means and deviations to 1e-12, its priors kept."""
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0.0, 6.0, 80))[:, None]
    cov = oracles.se_kernel(x, x, np.array([1.0]), 0.09) + np.diag((0.05 + 0.1 * x[:, 0]) ** 2)
    y = SLOPE * x[:, 0] + INTERCEPT + np.linalg.cholesky(cov) @ rng.standard_normal(80)
    design = np.column_stack([x[:, 0], np.ones(80)])
    standard_error = np.sqrt(np.linalg.inv(design.T @ np.linalg.solve(cov, design))[0, 0])
    kernel = SquaredExponential(prior={"lengthscales": Gamma(2.0, 2.0)})
    model = fit(HeteroscedasticGPRegressor(num_inducing=10, mean_function="linear", kernel=kernel,
                                           prior={"noise_variance": HalfNormal(1.0)}, max_iter=300), x, y)
    fitted = model.mean_function_
    assert isinstance(fitted, Linear)
    assert abs(fitted.weights[0] - SLOPE) < 4 * standard_error, (fitted, standard_error)
    far = np.array([[-200.0], [200.0]])
    np.testing.assert_allclose(model.predict(far), fitted(far), rtol=1e-6)

    new = np.linspace(-1.0, 7.0, 9)[:, None]
    mean, std = model.predict(new, return_std=True)
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.model_.priors == (("raw_noise_variance", HalfNormal(1.0)),)
    assert settings_kernel(HETEROSCEDASTIC.Settings(kernel=loaded.kernel)).prior == (("lengthscales", Gamma(2.0, 2.0)),)
    loaded_mean, loaded_std = loaded.predict(new, return_std=True)
    np.testing.assert_allclose(loaded_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loaded_std, std, rtol=1e-12, atol=1e-12)
    pd.DataFrame(new, columns=["x0"]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written["mean"].to_numpy(), mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(written["std"].to_numpy(), std, rtol=1e-12, atol=1e-12)


def test_the_model_tables_and_set_give_its_priors_mean_and_fixed_noise(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[model]\nmean_function = "linear"\nfixed = "noise_variance"\n\n[model.kernel]\nname = "se"\n'
                    'prior = { variance = { name = "gamma", shape = 2.0, rate = 2.0 } }\n\n'
                    '[model.prior]\nnoise_variance = { name = "half-normal", scale = 0.5 }\n')
    by_set = parse_settings(["model.mean_function=linear", "model.fixed=noise_variance", "model.kernel.name=se",
                             "model.kernel.prior.variance.name=gamma", "model.kernel.prior.variance.shape=2.0",
                             "model.kernel.prior.variance.rate=2.0", "model.prior.noise_variance.name=half-normal",
                             "model.prior.noise_variance.scale=0.5"])
    for config in (load_config(path), load_config(None, settings=by_set)):
        settings = model_settings(HETEROSCEDASTIC, config.model)
        assert HETEROSCEDASTIC.build(settings, {}).priors == (("raw_noise_variance", HalfNormal(0.5)),)
        assert settings_kernel(settings).prior == (("variance", Gamma(2.0, 2.0)),)
        assert isinstance(settings_mean(settings), Linear) and settings.fixed_leaves() == {"raw_noise_variance"}


@pytest.mark.heavy  # a fit of 3 L-BFGS iterations at the tiny shapes: ~8 s
def test_a_fixed_noise_level_is_kept_to_the_bit():
    from pep_gp.core.likelihoods import Gaussian
    from tests import tiny

    x, y = tiny.data()["regression"]
    model = fit(HeteroscedasticGPRegressor(num_inducing=tiny.INDUCING, max_iter=3, noise_variance=0.05,
                                           fixed="noise_variance"), x, y)
    start = Gaussian.init_params(0.05)["raw_noise_variance"]
    assert np.asarray(model.params_.likelihood["raw_noise_variance"]).tobytes() == np.asarray(start).tobytes()
    assert np.any(np.asarray(model.params_.kernel.variance.raw) != 0.0)  # the rest moved
