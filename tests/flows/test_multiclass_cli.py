"""``pep train --model multiclass-sep --json`` and ``pep evaluate`` on a 3-class store (issue 5 item 3)."""

from __future__ import annotations

import json

import pytest

from tests.flows.test_train_cli import pep
from tests.trainstores import config_for, config_toml, make_store


@pytest.mark.exhaustive
@pytest.mark.slow
def test_multiclass_sep_train_and_evaluate_json(tmp_path):
    store = make_store(tmp_path / "three-class.zarr", n_classes=3)
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(config_for("multiclass-sep")))
    run_dir = tmp_path / "run"
    summary = json.loads(pep("train", "--model", "multiclass-sep", "--data", store.path, "--run-dir",
                             str(run_dir), "--config", str(config), "--epochs", "2", "--json").stdout)
    assert {"test_error", "test_nll", "n_test", "steps", "epochs", "seconds", "checkpoint"} <= set(summary)
    assert (summary["steps"], summary["epochs"], summary["n_test"]) == (10, 2, 100)
    assert summary["test_nll"] < 1.0 and summary["test_error"] < 0.5
    metrics = json.loads(pep("evaluate", "--run-dir", str(run_dir), "--json").stdout)
    assert (metrics["test_error"], metrics["test_nll"]) == (summary["test_error"], summary["test_nll"])
