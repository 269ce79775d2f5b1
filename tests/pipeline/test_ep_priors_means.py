"""Priors and mean functions of the EP classifiers from their estimators (issue 65): ``TiedEPClassifier`` (also
``[model]`` tables, ``--set``, a saved run and ``pep predict``), ``ExactGPClassifier`` and
``MultiClassEPClassifier``: a mean trains with the kernel, is reported in the data's units and carries the
predictions far from the data; a lengthscale prior moves the fitted lengthscales towards its mode."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp import ExactGPClassifier, MultiClassEPClassifier, TiedEPClassifier
from pep_gp.core.priors import LogNormal
from pep_gp.kernels import SquaredExponential
from pep_gp.means import Constant, Linear
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.runs.config import load_config, parse_settings
from tests import tiny
from tests.fits import fit
from tests.pipeline.test_multiclass_priors_means import assert_a_saved_run_predicts_the_same, assert_towards_the_mode

LONG = SquaredExponential(prior={"lengthscales": LogNormal(np.log(20.0), 0.1)})  # ℓ ≈ 20: inputs span a few units


@pytest.mark.heavy  # a fit, a save and pep predict's read of it: ~10 s on 2 shared cores
def test_the_tied_ep_classifiers_mean_trains_reverts_far_away_and_comes_back_from_a_saved_run(tiny_data, tmp_path):
    x, y = tiny_data["binary"]
    model = fit(TiedEPClassifier(**tiny.SETTINGS["TiedEPClassifier"], mean_function="linear"), x, y)
    assert isinstance(model.params_.mean, Linear) and float(model.params_.mean.bias) != 0.0
    fitted = model.mean_function_
    far = x[:4] + 60.0
    np.testing.assert_allclose(model.predict_f(far)[0], fitted(jnp.asarray(far)), rtol=1e-6)
    assert_a_saved_run_predicts_the_same(model, x, tmp_path)


@pytest.mark.heavy  # four L-BFGS-B fits of the exact GP: ~10 s on 2 shared cores
def test_the_exact_gp_classifiers_mean_and_prior(tiny_data):
    x, y = tiny_data["binary"]
    model = fit(ExactGPClassifier(max_iter=10, mean_function=Constant(0.3)), x, y)
    assert isinstance(model.mean_function_, Constant) and float(model.mean_function_.constant) != 0.3
    far = x[:4] + 60.0
    np.testing.assert_allclose(model.predict_f(far)[0], float(model.mean_function_.constant), rtol=1e-6)
    free, held = (fit(ExactGPClassifier(max_iter=10, kernel=kernel), x, y) for kernel in (None, LONG))
    assert held.kernel_.prior == LONG.prior
    assert_towards_the_mode(held.kernel_, free.kernel_)


@pytest.mark.exhaustive  # three short untied fits: 22 s idle (tests/core/test_ep_priors_means.py checks the terms)
@pytest.mark.heavy
def test_the_untied_multiclass_classifiers_per_class_means_and_prior(tiny_data):
    x, y = tiny_data["multiclass"]
    settings = tiny.SETTINGS["MultiClassEPClassifier"]
    model = fit(MultiClassEPClassifier(**settings, mean_function="constant"), x, y)
    fitted = model.mean_function_
    assert isinstance(fitted, Constant) and np.shape(fitted.constant) == (tiny.CLASSES,)
    np.testing.assert_allclose(model.predict_f(x[:4] + 60.0)[0], np.broadcast_to(fitted.constant, (4, tiny.CLASSES)),
                               rtol=1e-6)
    free, held = (fit(MultiClassEPClassifier(**settings, kernel=kernel), x, y) for kernel in (None, LONG))
    assert_towards_the_mode(held.params_.kernel, free.params_.kernel)


def test_the_tied_ep_classifier_takes_the_mean_and_prior_tables_and_set():
    config = load_config(None, settings=parse_settings(["model.mean_function=linear", "model.kernel.name=se",
                                                         "model.kernel.prior.variance.name=half-normal"]))
    settings = model_settings(get_model("tied-ep-classifier"), config.model)
    assert settings.mean_function == {"name": "linear", "bias": 0.0}
    assert settings.kernel["prior"] == {"variance": {"name": "half-normal", "scale": 1.0}}
