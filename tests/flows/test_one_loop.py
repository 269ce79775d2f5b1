"""One training loop: for every model, an estimator's ``fit`` and ``pep train --cluster none`` run the same
step on the same rows with the same settings, and end with the same parameters (bit for bit)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pep_gp.pipeline.data.sizes import bucket
from pep_gp.pipeline.estimators.models import ESTIMATORS
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.runs.run import load_run
from tests.flows.test_train_cli import pep
from tests.trainstores import MULTICLASS_MODELS, PAIRWISE, leaves_equal, make_store

SETTINGS = {"deep-gp": {"num_inducing": 6, "hidden_dims": [2]}, "deep-gp-classifier": {"num_inducing": 6, "hidden_dims": [2]},
            "deep-gp-multiclass": {"num_inducing": 6, "hidden_dims": []},
            **{name: {"num_inducing": 6, **PAIRWISE} for name in MULTICLASS_MODELS}}


# One model of each way through the trainer (no site updates, a regression target's scaling, multi-class SEP's
# sites, a deep GP's layers); the others' settings reach their estimators as the registry test checks
# (tests/test_models.py). All of them -m exhaustive: .ci/run's 25 minutes leave no room for this loop.
FULL_BATCH = {"multi-output-regressor"}
PAPERS_MODEL = {"deep-gp": {"early_stopping": False, "input_mean_function": None}}
"""The estimator's arguments for the model ``pep train`` trains where its own defaults differ: ``DeepGPRegressor``
stops early on held-out rows and adds a line in the inputs (its ``_own_defaults``), ``--model deep-gp`` is Bui et
al.'s model on every row."""
SHARING = {"deep-gp-classifier", "deep-gp-multiclass", "multiclass-direct", "sparse-gp-ordinal", "tied-ep-classifier"}


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.exhaustive) if name in SHARING else name
                                  for name in sorted(MODELS)])
def test_estimator_fit_equals_pep_train(tmp_path, name):
    spec = MODELS[name]
    multiclass = spec.task == "classification" and spec.n_classes is None
    # one chunk per split (at least the default chunk rows), so that the store's statistics are the estimator's
    store = make_store(tmp_path / "data.zarr", task=spec.task, n_classes=3 if multiclass else 2, chunk_rows=10_000)
    settings = SETTINGS.get(name, {"num_inducing": 6})
    # a model that conditions on every training row at once (the multi-output bound) takes them as one block, of
    # the padded size its estimator gives it
    batch = bucket(store.n_rows("train")) if name in FULL_BATCH else 160
    fit = {**({"solver": "adam"} if name in FULL_BATCH else {}), **PAPERS_MODEL.get(name, {})}  # L-BFGS is its default
    steps, options = 8, ["--max-steps", "8", "--learning-rate", "0.05", "--batch-size", str(batch), "--seed", "3",
                         f"--set=block_rows={batch}"]
    sets = [f"--set=model.{key}={json.dumps(value)}" for key, value in settings.items()]
    summary = json.loads(pep("train", "--model", name, "--data", store.path, "--run-dir", str(tmp_path / "run"),
                             *options, "--set=tol=0", *sets, "--cluster", "none", "--json").stdout)
    assert summary["steps"] == steps and summary["rejected_steps"] == 0

    x, y = (a[:] for a in store.arrays("train"))  # the stored (float32, shuffled) training rows
    estimator = ESTIMATORS[name](**settings, **fit, max_iter=steps, tol=0, learning_rate=0.05, batch_size=batch, seed=3)
    estimator.fit(x.astype(np.float64), y)
    trained = load_run(tmp_path / "run").trees["params"]
    if name in FULL_BATCH:  # the run's params hold its training rows too (WithRows); the estimator keeps them apart
        trained = trained.params
    assert leaves_equal(estimator.params_, trained)
    fewer = ESTIMATORS[name](**settings, **fit, max_iter=steps - 1, tol=0, learning_rate=0.05, batch_size=batch,
                             seed=3)
    assert not leaves_equal(trained, fewer.fit(x.astype(np.float64), y).params_)
