"""The deep GPs specified fully from the estimators, ``pep train`` (TOML and ``--set``), saved runs and ``pep predict``
(issue 65): a kernel per layer (``kernel=[…]``, ``[[model.kernel]]``), ``fixed``/``prior`` naming the layers'
``noise_variance`` (kept to the bit through a fit; its prior in the model's energy), and the multi-class deep GP's
per-class output means; refusals in one line; one kernel still every layer's, the same bits."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd
import pytest

import pep_gp
from pep_gp import DeepGPClassifier, DeepGPRegressor, MultiClassDeepGPClassifier
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import UPPER_LOG_LENGTHSCALE
from pep_gp.kernels import Matern32, SquaredExponential
from pep_gp.means import Linear
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.models.predictive import MIXTURE_SEED, MultiClassPredictive, predict_in_blocks
from pep_gp.pipeline.models.sparse_gp import INITIAL_NOISE_VARIANCE
from pep_gp.pipeline.runs.config import TrainConfig, load_config, parse_settings
from pep_gp.pipeline.runs.predict import predict
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.priors import Gamma, LogNormal
from tests import tiny
from tests.fits import fit


SPELLED = """[model]
hidden_dims = [2]
kernel = ["matern32", "se"]
fixed = "noise_variance"
prior = { noise_variance = { name = "log-normal", mean = -3.0, sigma = 1.0 } }
"""
TABLES = """[model]
hidden_dims = [2]

[[model.kernel]]
name = "matern32"
prior = { lengthscales = { name = "gamma", shape = 2.0, rate = 2.0 } }

[[model.kernel]]
name = "se"
"""
BY_SET = ['model.kernel=["matern32", "se"]', "model.hidden_dims=[2]", "model.fixed=noise_variance",
          "model.prior.noise_variance.name=log-normal", "model.prior.noise_variance.mean=-3.0",
          "model.prior.noise_variance.sigma=1.0"]


def _assert_noise_kept_while_the_output_kernel_moved(params, noise_variance):
    """Every layer's noise is its start to the bit, while the output layer's lengthscales left theirs (``log ℓ = 1``,
    :data:`~pep_gp.core.models.deep_gp.UPPER_LOG_LENGTHSCALE`): the fit moved what it was free to move."""
    start = np.asarray(Gaussian.init_params(noise_variance)["raw_noise_variance"])
    for layer in params.layers:
        np.testing.assert_array_equal(np.asarray(layer.likelihood["raw_noise_variance"]), start)
    assert np.all(np.asarray(params.layers[-1].kernel.lengthscales.raw) != UPPER_LOG_LENGTHSCALE)


def test_the_toml_tables_and_set_give_a_kernel_per_layer_and_the_noises_settings(tmp_path):
    """``kernel = [...]``, ``[[model.kernel]]`` tables and ``--set model.kernel=[...]`` give the same kernels per
    layer; ``fixed``/``prior`` name ``noise_variance`` (every layer's noise leaf); one kernel is every layer's."""
    spelled, tables = tmp_path / "spelled.toml", tmp_path / "tables.toml"
    spelled.write_text(SPELLED)
    tables.write_text(TABLES)
    by_set = parse_settings(BY_SET)
    for name in ("deep-gp", "deep-gp-classifier", "deep-gp-multiclass"):
        spec = get_model(name)
        for config in (load_config(spelled), load_config(None, settings=by_set), load_config(tables)):
            settings = model_settings(spec, config.model)
            assert [type(kernel) for kernel in settings.layer_kernels()] == [Matern32, SquaredExponential]
        assert settings.layer_kernels()[0].prior == (("lengthscales", Gamma(2.0, 2.0)),)
        settings = model_settings(spec, load_config(spelled).model)
        assert settings.fixed_leaves() == {"raw_noise_variance"}
        assert settings.leaf_priors() == (("raw_noise_variance", LogNormal(-3.0, 1.0)),)
        one = model_settings(spec, {"kernel": "matern32", "hidden_dims": [2]})
        assert one.layer_kernels() == (one.layer_kernels()[0],) * 2 and isinstance(one.kernel, dict)


def test_refusals_are_one_line():
    with pytest.raises(InputError, match=r"model\.: Value error, kernel: one kernel for every layer, or a list of one per "
                                         r"layer \(3: the 2 hidden layers' then the output's\); got a list of 2"):
        model_settings(get_model("deep-gp"), {"hidden_dims": [2, 2], "kernel": ["se", "se"]})
    with pytest.raises(InputError, match=r"model\.: Value error, fixed names \['dof'\], which likelihood "
                                         r"'gaussian' does not have"):
        model_settings(get_model("deep-gp"), {"fixed": "dof"})
    with pytest.raises(ValueError, match=r"^fixed/prior: noise_variance is the hidden layers' Gaussian noise[^\n]*"
                                         r"hidden_dims=\(\) has none$"):
        DeepGPClassifier(hidden_dims=(), fixed="noise_variance", num_inducing=2).fit(np.eye(4), np.arange(4) % 2)


@pytest.mark.heavy  # a two-layer fit of 20 steps, a save, a load and pep predict: 61 s on 2 shared cores
def test_a_regressor_with_a_kernel_per_layer_keeps_its_fixed_noise_to_the_bit_and_a_saved_run_predicts_the_same(
        tmp_path):
    x, y = tiny.data()["regression"]
    kernels = [Matern32(prior={"lengthscales": Gamma(2.0, 2.0)}), SquaredExponential()]
    estimator = DeepGPRegressor(hidden_dims=(2,), kernel=kernels, fixed="noise_variance", noise_variance=0.03,
                                num_inducing=tiny.INDUCING, max_iter=20, learning_rate=0.05)
    model = fit(estimator, x, y)
    assert [type(kernel) for kernel in model.kernel_] == [Matern32, SquaredExponential]
    assert model.kernel_[0].prior == kernels[0].prior
    _assert_noise_kept_while_the_output_kernel_moved(model.params_, 0.03)
    mean, std = model.predict(x, return_std=True)
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    np.testing.assert_array_equal(loaded.predict(x, return_std=True), (mean, std))
    pd.DataFrame(x[:5], columns=["x0", "x1", "x2"]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["mean"].to_numpy(), mean[:5], rtol=1e-12)


@pytest.mark.heavy
@pytest.mark.exhaustive  # a two-layer multi-class fit of 20 steps, a save and a load: 60 s on 2 shared cores
def test_the_multiclass_deep_gp_fits_a_linear_mean_per_class_and_a_saved_run_keeps_it(tmp_path):
    """Each class's output GP trains its own ``w_cᵀh + b_c`` (the rows differ); ``mean_function_`` holds them; a saved
    run predicts the same probabilities."""
    x, labels = tiny.data()["multiclass"]
    model = fit(MultiClassDeepGPClassifier(hidden_dims=(2,), mean_function="linear",
                                           **tiny.SETTINGS["MultiClassDeepGPClassifier"]), x, labels)
    weights = np.asarray(model.params_.mean.weights)
    assert weights.shape == (tiny.CLASSES, 2) and len({tuple(row) for row in weights}) == tiny.CLASSES
    fitted = model.mean_function_
    assert isinstance(fitted, Linear) and np.shape(fitted.weights) == (tiny.CLASSES, 2)
    proba = model.predict_proba(x)
    assert np.mean(model.classes_[np.argmax(proba, 1)] == labels) > 0.5
    model.save(tmp_path / "run")
    np.testing.assert_array_equal(pep_gp.load(tmp_path / "run").predict_proba(x), proba)


@pytest.mark.heavy
@pytest.mark.exhaustive  # a 3-step two-layer store run and a load: 53 s on 2 shared cores
def test_pep_train_set_records_the_layer_kernels_and_keeps_the_fixed_noise(regression_store, tmp_path):
    settings = load_config(None, settings=parse_settings([
        "model.num_inducing=4", "model.hidden_dims=[2]", 'model.kernel=["matern32", "se"]',
        "model.fixed=noise_variance", "model.prior.noise_variance.name=log-normal"])).model
    result = train(TrainJob("deep-gp", regression_store, TrainConfig(max_steps=3, batch_size=1000, model=settings),
                            tmp_path / "run"))
    recorded = load_run(tmp_path / "run").meta["model_settings"]
    assert [kernel["name"] for kernel in recorded["kernel"]] == ["matern32", "se"]
    assert recorded["fixed"] == ["noise_variance"] and recorded["prior"]["noise_variance"]["name"] == "log-normal"
    _assert_noise_kept_while_the_output_kernel_moved(result.params, INITIAL_NOISE_VARIANCE)
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.spec.Settings(**load_run(tmp_path / "run").meta["model_settings"]).fixed_leaves() == {
        "raw_noise_variance"}
    _assert_noise_kept_while_the_output_kernel_moved(loaded.params_, INITIAL_NOISE_VARIANCE)


@pytest.mark.heavy
def test_mixture_samples_give_the_multiclass_mixtures_probabilities_whatever_rows_come_with_them():
    """``mixture_samples=S`` (issue 65): the run's predictive is the core model's Monte Carlo mixture of ``S`` paths
    from the key of ``MIXTURE_SEED`` with common draws, so predicting 7 rows in padded blocks of 4 gives what all 7
    together give; the default (0) keeps eq. (68) on the moments (``MultiClassPredictive``, its bits). On the state
    a fit starts from (a deep GP's fit compiles for ~30 s; the estimators' path is the exhaustive test below)."""
    x = np.random.default_rng(0).normal(size=(7, 3))
    spec = get_model("deep-gp-multiclass")
    settings = model_settings(spec, {"hidden_dims": [2], "num_inducing": 4, "mixture_samples": 16})
    model = spec.build(settings, {"class_counts": [3, 2, 2]})
    params = spec.init(model, x, settings, 0)
    default = spec.build(model_settings(spec, {}), {"class_counts": [3, 2, 2]})
    assert default.mixture_samples == 0 and isinstance(spec.predictive(default, None), MultiClassPredictive)
    blocks = predict_in_blocks(spec.predictive(model, None), params, x, 4)["log_proba"]
    together = jax.jit(lambda params: model.mixture_log_proba(params, x, jax.random.key(MIXTURE_SEED), 16,
                                                              common_draws=True))(params)
    np.testing.assert_allclose(blocks, together, rtol=1e-12, atol=1e-12)


@pytest.mark.heavy
@pytest.mark.exhaustive  # a two-layer multi-class fit of 20 steps, a save, a load and pep predict: ~60 s on 2 shared cores
def test_a_multiclass_deep_gp_with_mixture_samples_predicts_the_same_bits_saved_and_from_pep_predict(tmp_path):
    x, labels = tiny.data()["multiclass"]
    model = fit(MultiClassDeepGPClassifier(hidden_dims=(2,), mixture_samples=32,
                                           **tiny.SETTINGS["MultiClassDeepGPClassifier"]), x, labels)
    proba = model.predict_proba(x)
    assert np.mean(model.classes_[np.argmax(proba, 1)] == labels) > 0.5
    model.save(tmp_path / "run")
    np.testing.assert_array_equal(pep_gp.load(tmp_path / "run").predict_proba(x), proba)
    pd.DataFrame(x, columns=["x0", "x1", "x2"]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written[[f"proba_{label}" for label in model.classes_]].to_numpy(), proba,
                               rtol=1e-12, atol=1e-15)
