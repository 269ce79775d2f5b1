"""Priors and an output mean function in the deep GP estimators and ``--model deep-gp*`` (issue 65): a one-layer
regressor with a linear mean predicts its fitted mean far from the data and a saved run predicts the same
(``pep_gp.load``, ``pep predict``); ``mean_function_`` of a model with hidden layers is a function of the last
hidden layer's outputs; the ``[model]`` tables and ``--set`` give priors and means (the multi-class deep GP's too),
and a mean of one's own needs ``hidden_dims=()``, refused in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pep_gp
from pep_gp import DeepGPRegressor
from pep_gp.kernels import SquaredExponential
from pep_gp.means import Constant, Linear, MeanFunction, register_mean
from pep_gp.pipeline.data.blocks import TargetScaling
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.models.protocol import settings_kernel, settings_mean
from pep_gp.pipeline.runs.config import load_config, parse_settings
from pep_gp.pipeline.runs.predict import predict
from pep_gp.priors import Gamma, LogNormal
from tests import tiny
from tests.fits import fit


@register_mean("test-deep-cubic")
class Cubic(MeanFunction):
    """A user's own mean, ``a·x₀³``: its moments under a Gaussian input are not the deep GP's closed forms."""

    parameters = ("a",)

    def __call__(self, x):
        return self.a * x[:, 0] ** 3


@pytest.mark.heavy  # a one-layer fit of 60 steps, a save, a load and pep predict: 30-60 s on 2 shared cores
def test_a_one_layer_linear_mean_reverts_far_away_and_a_saved_run_predicts_the_same(tmp_path):
    x, y = tiny.data()["regression"]
    y = y + 2.0 * x[:, 1]
    kernel = SquaredExponential(prior={"lengthscales": Gamma(2.0, 2.0), "variance": LogNormal()})
    model = fit(DeepGPRegressor(hidden_dims=(), mean_function="linear", kernel=kernel,
                                **tiny.SETTINGS["DeepGPRegressor"]), x, y)
    fitted, line = model.mean_function_, model.input_mean_function_  # without hidden layers both are lines in x
    assert isinstance(fitted, Linear) and isinstance(line, Linear)
    assert fitted.weights[1] + line.weights[1] > 1.0  # the trend in x₁ went to the means
    far = np.array([[300.0, -300.0, 300.0], [-300.0, 300.0, 0.0]])
    np.testing.assert_allclose(model.predict(far), fitted(far) + line(far), rtol=1e-9)
    mean, std = model.predict(x, return_std=True)
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    assert settings_kernel(loaded.spec.Settings(kernel=loaded.kernel)).prior == kernel.prior
    loaded_mean, loaded_std = loaded.predict(x, return_std=True)
    np.testing.assert_allclose(loaded_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loaded_std, std, rtol=1e-12, atol=1e-12)
    pd.DataFrame(x[:7], columns=["x0", "x1", "x2"]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written["mean"].to_numpy(), mean[:7], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(written["std"].to_numpy(), std[:7], rtol=1e-12, atol=1e-12)


def test_with_hidden_layers_mean_function_is_of_the_last_hidden_outputs_in_the_targets_units():
    """On the state a fit starts from (a deep GP's fit compiles for ~30 s): the output's linear mean has one weight
    per hidden output, ``shift + scale·(wᵀh + b)`` in the targets' units with ``h`` as the model sees it."""
    estimator = DeepGPRegressor(hidden_dims=(2,), num_inducing=4, mean_function=Linear(weights=[0.5, -1.0], bias=0.2))
    settings = estimator.spec.Settings(**estimator._settings())
    estimator.params_ = estimator.spec.init(estimator.spec.build(settings, {}), np.random.default_rng(0).normal(
        size=(20, 3)), settings, 0)
    estimator.x_mean_, estimator.x_std_, estimator.targets_ = np.zeros(3), np.ones(3), TargetScaling(10.0, 2.0)
    assert repr(estimator.mean_function_) == repr(Linear(weights=[1.0, -2.0], bias=10.4))


def test_the_model_tables_and_set_give_priors_and_means_and_refusals_are_one_line(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[model]\nhidden_dims = [2]\nmean_function = "constant"\n\n[model.kernel]\nname = "matern52"\n'
                    'prior = { lengthscales = { name = "gamma", shape = 2.0, rate = 2.0 } }\n')
    by_set = parse_settings(["model.hidden_dims=[2]", "model.mean_function=constant", "model.kernel.name=matern52",
                             "model.kernel.prior.lengthscales.name=gamma", "model.kernel.prior.lengthscales.shape=2.0",
                             "model.kernel.prior.lengthscales.rate=2.0"])
    for name in ("deep-gp", "deep-gp-classifier"):
        for config in (load_config(path), load_config(None, settings=by_set)):
            settings = model_settings(get_model(name), config.model)
            assert settings_kernel(settings).prior == (("lengthscales", Gamma(2.0, 2.0)),)
            assert isinstance(settings_mean(settings), Constant)
    multiclass = model_settings(get_model("deep-gp-multiclass"), load_config(path).model)
    assert multiclass.layer_kernels()[0].prior and isinstance(settings_mean(multiclass), Constant)

    with pytest.raises(ValueError, match=r"^DeepGPRegressor: : Value error, mean_function: mean function 'test-deep-cubic': a deep "
                                         r"GP with hidden layers takes a constant or linear output mean[^\n]*$"):
        DeepGPRegressor(mean_function=Cubic(a=1.0)).fit(np.zeros((4, 1)), np.arange(4.0))
    assert DeepGPRegressor(hidden_dims=(), mean_function=Cubic(a=1.0))._settings()["mean_function"]["a"] == 1.0
