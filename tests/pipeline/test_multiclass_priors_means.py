"""Priors and mean functions of the multi-class classifiers from the estimators, ``[model]`` tables, ``--set``,
saved runs and ``pep predict`` (issue 65): a per-class linear mean trains with the rest and is reported in the
data's units, far rows revert to it, a saved run gives the same predictions; a lengthscale prior moves the
fitted lengthscales towards its mode."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from pep_gp import DirectMultiClassGPClassifier, MultiClassGPClassifier, load
from pep_gp.core.priors import LogNormal
from pep_gp.kernels import SquaredExponential
from pep_gp.means import Constant, Linear
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.runs.config import load_config, parse_settings
from pep_gp.pipeline.runs.predict import predict
from tests import tiny
from tests.fits import fit


@pytest.mark.heavy  # a fit, a save and pep predict's read of it: ~10 s on 2 shared cores
def test_a_per_class_linear_mean_trains_reverts_far_away_and_comes_back_from_a_saved_run(tiny_data, tmp_path):
    x, y = tiny_data["multiclass"]
    model = fit(MultiClassGPClassifier(**tiny.SETTINGS["MultiClassGPClassifier"], mean_function="linear"), x, y)
    trained = model.params_.mean
    assert isinstance(trained, Linear) and trained.weights.shape == (tiny.CLASSES, tiny.FEATURES)
    assert np.all(np.asarray(trained.bias) != 0.0)  # each class's bias moved from its start
    fitted = model.mean_function_
    assert isinstance(fitted, Linear) and np.shape(fitted.bias) == (tiny.CLASSES,)
    np.testing.assert_allclose(fitted(jnp.asarray(x)), trained.each(jnp.asarray((x - model.x_mean_) / model.x_std_)),
                               rtol=1e-12, atol=1e-12)
    far = x[:4] + 60.0  # tens of lengthscales from the data: each latent is its class's prior mean
    np.testing.assert_allclose(model.predict_f(far)[0], fitted(jnp.asarray(far)), rtol=1e-6)
    draws = model.sample_f(x[:3], n_samples=400, seed=2)
    mean, var = model.predict_f(x[:3])
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(var / 400))

    loaded = assert_a_saved_run_predicts_the_same(model, x, tmp_path)
    np.testing.assert_array_equal(loaded.params_.mean.weights, trained.weights)


def assert_a_saved_run_predicts_the_same(model, x, tmp_path):
    """``model`` saved: ``pep_gp.load`` and ``pep predict`` (its function, in this process) give its class
    probabilities at the rows ``x`` (to 1e-12); the loaded estimator is returned."""
    model.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    np.testing.assert_allclose(loaded.predict_proba(x), model.predict_proba(x), rtol=1e-12, atol=1e-15)
    pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written[[f"proba_{c}" for c in model.classes_]].to_numpy(), model.predict_proba(x),
                               rtol=1e-12, atol=1e-15)
    return loaded


def assert_towards_the_mode(held, free, mode: float = 20.0):
    """Every lengthscale fitted with the prior lies nearer its mode (on the log scale) than the one fitted without."""
    distance = [np.abs(np.asarray(kernel.lengthscales.raw) - np.log(mode)) for kernel in (held, free)]
    assert np.all(distance[0] < distance[1]), distance


@pytest.mark.heavy  # two fits of each classifier: ~10 s on 2 shared cores
@pytest.mark.parametrize("estimator", [MultiClassGPClassifier, DirectMultiClassGPClassifier])
def test_a_lengthscale_prior_moves_the_fitted_lengthscales_towards_its_mode(tiny_data, estimator):
    """A tight log-normal prior about ℓ = 20 (the data's standardised inputs span a few units): every class's
    fitted lengthscales lie nearer its mode than without it."""
    x, y = tiny_data["multiclass"]
    settings = {**tiny.SETTINGS[estimator.__name__], "max_iter": 20}
    free = fit(estimator(**settings), x, y)
    prior = SquaredExponential(prior={"lengthscales": LogNormal(np.log(20.0), 0.1)})
    held = fit(estimator(**settings, kernel=prior), x, y)
    assert held.params_.kernel.prior == (("lengthscales", LogNormal(np.log(20.0), 0.1)),)
    assert_towards_the_mode(held.params_.kernel, free.params_.kernel)


def test_the_mean_and_prior_tables_and_set_load_as_the_multiclass_settings():
    spec = get_model("multiclass-sep")
    config = load_config(None, settings=parse_settings(["model.mean_function.name=constant",
                                                         "model.mean_function.constant=[0.5, -0.5, 0.0]",
                                                         "model.kernel.name=se",
                                                         "model.kernel.prior.lengthscales.name=log-normal"]))
    settings = model_settings(spec, config.model)
    assert settings.mean_function == {"name": "constant", "constant": [0.5, -0.5, 0.0]}
    assert settings.kernel["prior"] == {"lengthscales": {"name": "log-normal", "mean": 0.0, "sigma": 1.0}}
    assert model_settings(get_model("multiclass-direct"), {"mean_function": Constant(1.0)}).mean_function == {
        "name": "constant", "constant": 1.0}
