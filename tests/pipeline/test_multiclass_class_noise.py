"""The multi-class models' latent noise ``σ_{0,c}`` as a likelihood parameter (issue 65, items 1 and 3): ``[model]``
tables and ``--set`` give ``fixed``/``prior`` naming ``class_noise`` (its prior a density of each ``σ_{0,c}``, whose
energy is checked against scipy in tests/core/test_multiclass_priors_means.py); a fixed noise keeps its start to the
bit through an estimator's fit (L-BFGS, Adam, untied EP, the deep multi-class GP) while the kernel moves; ``pep train
--set`` records it and the saved run keeps it through ``pep_gp.load`` and ``pep predict``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pep_gp
from pep_gp import (DirectMultiClassGPClassifier, MultiClassDeepGPClassifier, MultiClassEPClassifier,
                    MultiClassGPClassifier)
from pep_gp.core.parameters import LOG
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.runs.config import TrainConfig, load_config, parse_settings
from pep_gp.pipeline.runs.predict import predict
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.priors import LogNormal
from tests import tiny
from tests.fits import fit
from tests.pipeline.test_likelihood_fixed import bits

SPELLED = """[model]
class_noise = 0.2
fixed = "class_noise"
prior = { class_noise = { name = "log-normal", mean = -2.0, sigma = 1.0 } }
"""
BY_SET = ["model.class_noise=0.2", "model.fixed=class_noise", "model.prior.class_noise.name=log-normal",
          "model.prior.class_noise.mean=-2.0", "model.prior.class_noise.sigma=1.0"]


def test_the_model_tables_and_set_name_class_noise_for_every_multiclass_model(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(SPELLED)
    for name, leaf in (("multiclass-sep", "raw_noise"), ("multiclass-direct", "raw_noise"),
                       ("deep-gp-multiclass", "raw_class_noise")):
        for config in (load_config(path), load_config(None, settings=parse_settings(BY_SET))):
            settings = model_settings(get_model(name), config.model)
            assert settings.class_noise == 0.2 and settings.fixed_leaves() == {leaf}
            assert settings.leaf_priors() == ((leaf, LogNormal(-2.0, 1.0), LOG.forward),)
    with pytest.raises(InputError, match=r"model\.: Value error, fixed names \['noise'\], which likelihood 'auto' does "
                                         r"not have; its parameters are \['class_noise'\][^\n]*$"):
        model_settings(get_model("multiclass-direct"), {"fixed": "noise"})


def _fitted(estimator, x, labels):
    """The fit's classes' noises and first class's lengthscales, and those of the state it started from
    (``max_iter=0``)."""
    start = fit(estimator.set_params(max_iter=0), x, labels)
    start_noise, start_kernel = _noise_and_kernel(start)
    model = fit(estimator.set_params(max_iter=tiny.SETTINGS[type(estimator).__name__]["max_iter"]), x, labels)
    return (start_noise, start_kernel), _noise_and_kernel(model)


def _noise_and_kernel(model):
    params = model.params_
    if isinstance(model, MultiClassDeepGPClassifier):
        return params.layers[-1].likelihood["raw_class_noise"], params.layers[-1].kernel.lengthscales.raw
    return params.raw_noise, params.kernel.lengthscales.raw


@pytest.mark.heavy  # four short fits of the tiny rows: 3-10 s each on 2 shared cores
@pytest.mark.parametrize("estimator", [
    DirectMultiClassGPClassifier,  # its tiny settings' solver: L-BFGS
    MultiClassGPClassifier,  # Adam's steps between the SEP updates
    pytest.param(MultiClassEPClassifier, marks=pytest.mark.exhaustive),
    pytest.param(MultiClassDeepGPClassifier, marks=pytest.mark.exhaustive),
], ids=lambda cls: cls.__name__)
def test_a_fixed_class_noise_keeps_its_bits_while_the_kernel_moves(tiny_data, estimator):
    x, labels = tiny_data["multiclass"]
    extra = {"hidden_dims": ()} if estimator is MultiClassDeepGPClassifier else {}
    (start_noise, start_kernel), (noise, kernel) = _fitted(
        estimator(**tiny.SETTINGS[estimator.__name__], class_noise=0.3, fixed="class_noise", **extra), x, labels)
    assert bits(noise) == bits(start_noise) == bits(np.log(np.full(tiny.CLASSES, 0.3)))
    assert np.max(np.abs(np.asarray(kernel) - np.asarray(start_kernel))) > 1e-3


@pytest.mark.heavy
@pytest.mark.exhaustive  # a 3-step store run, a load and pep predict: ~15 s on 2 shared cores
def test_pep_train_set_keeps_a_fixed_class_noise_through_load_and_predict(three_class_store, tmp_path):
    config = load_config(None, settings=parse_settings([*BY_SET, "model.num_inducing=4"]))
    train(TrainJob("multiclass-direct", three_class_store, TrainConfig(max_steps=3, batch_size=1000,
                                                                       model=config.model), tmp_path / "run"))
    recorded = load_run(tmp_path / "run").meta["model_settings"]
    assert recorded["fixed"] == ["class_noise"] and recorded["prior"]["class_noise"]["name"] == "log-normal"
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.fixed == ("class_noise",) and loaded.class_noise == 0.2
    assert bits(loaded.params_.raw_noise) == bits(np.log(np.full(3, 0.2)))
    x = three_class_store.arrays("test")[0][:5]
    pd.DataFrame(x, columns=[f"x{i}" for i in range(x.shape[1])]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written.filter(like="proba_").to_numpy(), loaded.predict_proba(x), rtol=1e-6)
