"""``pep train --model deep-gp --json`` and ``pep evaluate`` on a regression store: the architecture comes
from the config's ``[model]`` table and lands in the checkpoint; bad settings are refused by name."""

from __future__ import annotations

import json

import pytest

from pep_gp.pipeline.runs.run import load_run
from tests.flows.test_train_cli import pep
from tests.trainstores import FAST, config_toml, make_store


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.long
def test_deep_gp_train_and_evaluate_json(tmp_path):
    store = make_store(tmp_path / "regression.zarr", task="regression")
    config = tmp_path / "deep.toml"
    config.write_text(config_toml(FAST.model_copy(update={"model": {"hidden_dims": [2, 3], "num_inducing": 5}})))
    run_dir = tmp_path / "run"
    summary = json.loads(pep("train", "--model", "deep-gp", "--data", store.path, "--run-dir", str(run_dir),
                             "--config", str(config), "--epochs", "4", "--json").stdout)
    assert (summary["steps"], summary["epochs"], summary["n_test"]) == (20, 4, 100)
    assert summary["rmse"] < 0.75  # y = sin(2 x0) + noise 0.1 has deviation ≈ 0.7: better than the mean
    layers = load_run(run_dir).trees["params"].layers
    assert [layer.inducing.shape for layer in layers] == [(2, 5, 3), (3, 5, 2), (1, 5, 3)]
    metrics = json.loads(pep("evaluate", "--run-dir", str(run_dir), "--json").stdout)
    assert (metrics["rmse"], metrics["test_nll"]) == (summary["rmse"], summary["test_nll"])
    config.write_text(config_toml(FAST.model_copy(update={"model": {"hidden_dims": [0]}})))
    done = pep("train", "--model", "deep-gp", "--data", store.path, "--run-dir", str(tmp_path / "bad"),
               "--config", str(config), check=False)
    assert done.returncode == 2 and "model.hidden_dims" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "bad").exists()
