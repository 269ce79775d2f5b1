"""``pep train --set`` with a kernel prior and a linear mean for the models of issue 65's sixth wave (the
heteroscedastic regressor, the deep GP): the run records both, trains the mean with the rest, and
``pep_gp.load`` rebuilds the trained mean to the bit and the priors."""

from __future__ import annotations

import numpy as np
import pytest

import pep_gp
from pep_gp.means import Linear
from pep_gp.pipeline.runs.config import TrainConfig, load_config, parse_settings
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train

SET = ["model.num_inducing=4", "model.mean_function=linear", "model.kernel.name=se",
       "model.kernel.prior.lengthscales.name=gamma", "model.kernel.prior.lengthscales.shape=2.0",
       "model.kernel.prior.lengthscales.rate=2.0"]


@pytest.mark.heavy  # a 3-step store run and a load per model: 6 s (deep GP) and 12 s (heteroscedastic) idle
@pytest.mark.parametrize("model, extra", [
    pytest.param("sparse-gp-heteroscedastic", ["model.prior.noise_variance.name=half-normal"],
                 marks=pytest.mark.exhaustive),
    ("deep-gp", ["model.hidden_dims=[]"])])
def test_pep_train_set_trains_the_mean_and_a_loaded_run_keeps_it_and_the_priors(regression_store, tmp_path, model,
                                                                                extra):
    settings = load_config(None, settings=parse_settings(SET + extra)).model
    result = train(TrainJob(model, regression_store, TrainConfig(max_steps=3, batch_size=1000, model=settings),
                            tmp_path / "run"))
    assert isinstance(result.params.mean, Linear) and np.any(np.asarray(result.params.mean.weights) != 0.0)
    recorded = load_run(tmp_path / "run").meta["model_settings"]
    assert recorded["kernel"]["prior"] == {"lengthscales": {"name": "gamma", "shape": 2.0, "rate": 2.0}}
    loaded = pep_gp.load(tmp_path / "run")
    np.testing.assert_array_equal(loaded.params_.mean.weights, result.params.mean.weights)
    assert isinstance(loaded.mean_function_, Linear)
