"""A fit that collapses (issue 37: the sparse GP classifier climbed to a good optimum, then fell to a plateau
where every probability was ~0.5, and reported converged) ends at its best parameters, is reported as not
converged, warns, and makes ``pep train`` exit 1 unless ``--allow-degenerate``."""


import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.estimators.base import GPEstimator
from pep_gp.pipeline.estimators.fitted import GPRegressorMixin
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.training.stopping import COLLAPSE_FALL, StoppingRule
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from tests.pipeline.toy_model import ToySpec
from tests.trainstores import FAST, config_toml

COLLAPSING = ToySpec(fall=1.0)  # the site updates move post_mean from 0 to 1: F falls by ~N
SETTINGS = {"damping": 0.1}


def test_a_collapse_is_a_fall_of_the_window_mean_far_below_the_best():
    rule = StoppingRule(tol=1e-3, n_rows=100, window=10)
    rise = np.concatenate([np.linspace(-100.0, -50.0, 20), np.full(10, -50.0)])  # a climb to a flat top
    healthy = np.concatenate([rise, np.full(20, -50.0 - 100 * COLLAPSE_FALL / 2)])  # Adam's oscillation
    collapsed = np.concatenate([rise, np.full(20, -50.0 - 100 * COLLAPSE_FALL * 2)])  # every probability ~0.5
    best = max(rule.window_mean(rise[:t]) for t in range(10, 31))
    assert best == rule.window_mean(rise) == -50.0 and np.isnan(rule.window_mean(rise[:9]))
    assert rule.fall_per_row(best, healthy) == pytest.approx(COLLAPSE_FALL / 2)
    assert not rule.collapsed(best, healthy) and rule.collapsed(best, collapsed)
    assert rule.converged(collapsed) and rule.fall_per_row(float("-inf"), rise[:5]) == 0.0  # flat, yet collapsed


@pytest.mark.heavy
def test_a_collapsing_run_ends_at_its_best_params(regression_store, tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "toy", COLLAPSING)
    config = FAST.model_copy(update={"epochs": 10, "checkpoint_every": 100, "model": SETTINGS})
    result = train(TrainJob("toy", regression_store, config, tmp_path))
    assert result.collapse is not None and "fell from its best" in result.collapse
    assert result.converged or not result.stops_early  # the rule's verdict stays; what is reported is not
    assert not result.reported_converged
    kept, _ = Trainer(TrainJob("toy", regression_store, config, tmp_path), InProcess()).restore_or_init(resume=True)
    assert float(kept.params["post_mean"]) == float(result.params["post_mean"])  # what pep predict reads
    assert 0 <= kept.best_step < result.steps - 25 and kept.best_params is not None  # the best survives a resume
    assert float(result.params["post_mean"]) < 0.5  # the best step's, not the last's (~1)
    monkeypatch.setitem(MODELS, "toy", ToySpec())
    healthy = train(TrainJob("toy", regression_store, config, tmp_path / "healthy"))
    assert healthy.collapse is None


class ToyRegressor(GPRegressorMixin, GPEstimator):
    spec = COLLAPSING


def test_the_estimator_warns_and_is_not_converged(regression_store):
    x, y = regression_store.arrays("train")[0][:], regression_store.arrays("train")[1][:]
    with pytest.warns(ConvergenceWarning, match="collapsed: the energy fell from its best"):
        model = ToyRegressor(damping=0.1, max_iter=60, batch_size=96).fit(x, y)
    assert not model.converged_


def test_pep_train_exits_1_on_a_collapse_unless_allowed(regression_store, tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "toy", COLLAPSING)
    config = tmp_path / "config.toml"
    config.write_text(config_toml(FAST.model_copy(update={"epochs": 10, "checkpoint_every": 100, "model": SETTINGS})))
    args = ["train", "--model", "toy", "--data", regression_store.path, "--config", str(config), "--quiet"]
    refused = CliRunner().invoke(app, [*args, "--run-dir", str(tmp_path / "a")])
    assert refused.exit_code == 1 and "the fit collapsed" in refused.stderr and "--allow-degenerate" in refused.stderr
    allowed = CliRunner().invoke(app, [*args, "--run-dir", str(tmp_path / "b"), "--allow-degenerate"])
    assert allowed.exit_code == 0 and "warning: the fit collapsed" in allowed.stderr
