"""One training loop: an estimator's ``fit`` and ``pep train --cluster none`` run the same step on the
same rows with the same settings, and end with the same parameters (bit for bit)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pep_gp import MultiClassGPClassifier
from pep_gp.pipeline.training.config import TrainConfig
from pep_gp.pipeline.training.runs import load_run
from tests.flows.test_train_cli import pep
from tests.trainstores import config_toml, leaves_equal, make_store


@pytest.mark.slow
def test_estimator_fit_equals_pep_train(tmp_path):
    # one chunk per split, so the store's training statistics are computed exactly as the estimator's
    store = make_store(tmp_path / "three.zarr", n_classes=3, chunk_rows=1_000)
    settings = {"num_inducing": 6, "damping": 0.5, "damping_decay": 0.99}
    config = TrainConfig(model=settings, epochs=12, batch_size=400, learning_rate=0.05, checkpoint_every=5)
    config_file = tmp_path / "sep.toml"
    config_file.write_text(config_toml(config))
    summary = json.loads(pep("train", "--model", "multiclass-sep", "--data", store.path, "--run-dir",
                             str(tmp_path / "run"), "--config", str(config_file), "--cluster", "none", "--json").stdout)
    assert summary["steps"] == 12 and summary["rejected_steps"] == 0 and summary["rejected_site_updates"] == 0

    x, y = (a[:] for a in store.arrays("train"))  # the stored (float32, shuffled) training rows
    clf = MultiClassGPClassifier(num_inducing=6, alpha=1.0, max_iter=12, learning_rate=0.05, damping=0.5)
    clf.fit(x.astype(np.float64), y)
    trained = load_run(tmp_path / "run").trees["params"]
    assert leaves_equal(clf.params_, trained)
    one_step_less = MultiClassGPClassifier(num_inducing=6, alpha=1.0, max_iter=11, learning_rate=0.05, damping=0.5)
    assert not leaves_equal(trained, one_step_less.fit(x.astype(np.float64), y).params_)
