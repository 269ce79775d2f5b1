"""Training hooks on the estimators: ``callbacks=`` told of every step and evaluation (and able to stop the fit),
the MLflow and TensorBoard loggers read back from what they wrote, and validation-based early stopping
(scikit-learn's ``early_stopping``/``validation_fraction``/``n_iter_no_change``) re-scored on its held-out rows."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import train_test_split

from pep_gp import Callback, CollapsedGPRegressor, InputError, SparseGPClassifier, StopTraining
from pep_gp.pipeline.data.datasets import ArrayData
from pep_gp.pipeline.engine import Engine, InProcess
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.evidence import held_out_metrics
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from tests.pipeline.test_partial_fit import SETTINGS, rows  # noqa: F401 (a fixture): the step compiled once
from tests.trainstores import FAST, leaves_equal


class Recorder(Callback):
    """Everything a fit tells its callbacks; raises ``StopTraining`` (or ``error``) after step ``stop_at``."""

    def __init__(self, stop_at: int | None = None, error: Exception | None = None):
        self.stop_at, self.error = stop_at, error
        self.starts, self.energies, self.records, self.ends = [], [], [], []

    def on_start(self, info):
        self.starts.append(info)

    def on_step(self, step, energy):
        self.energies.append((step, energy))
        if step == self.stop_at:
            raise self.error or StopTraining(f"asked to stop at step {step}")

    def on_evaluation(self, record):
        self.records.append(record)

    def on_end(self, summary):
        self.ends.append(summary)


def test_a_callback_sees_every_step_s_energy_and_can_stop_the_fit(rows):
    X, y = rows
    stopper, watcher = Recorder(stop_at=6), Recorder()
    model = SparseGPClassifier(**SETTINGS, max_iter=12, callbacks=[stopper, watcher]).fit(X, y)
    assert model.n_iter_ == 6 and model.converged_ is False and model.stop_reason_ == "asked to stop at step 6"
    for seen in (stopper, watcher):  # each callback sees every event, also the one that stopped the fit
        assert [step for step, _ in seen.energies] == list(range(1, 7))
        np.testing.assert_array_equal([energy for _, energy in seen.energies], model.energy_trace_)
        assert [record["step"] for record in seen.records] == [4, 6]  # 4 steps an epoch; the stopped one's
        assert seen.starts[0]["model"] == "sparse-gp-classifier" and seen.starts[0]["model_settings"]["num_inducing"] == 6
        assert seen.ends == [{"n_iter": 6, "converged": False, "energy": model.energy_trace_[-1],
                              "log_marginal_likelihood": model.log_marginal_likelihood_value_}]


def test_a_callback_that_raises_stops_the_fit_with_its_own_error(rows):
    X, y = rows
    watcher = Recorder()
    with pytest.raises(KeyError, match="the callback's own"):
        SparseGPClassifier(**SETTINGS, max_iter=12, callbacks=[Recorder(stop_at=2, error=KeyError("the callback's own")),
                                                               watcher]).fit(X, y)
    assert len(watcher.energies) == 1 and watcher.ends == [None]  # the error ended step 2; told that the fit failed
    with pytest.raises(ValueError, match="callbacks: expected pep_gp.Callback instances .*got builtin_function_or_method$"):
        SparseGPClassifier(callbacks=[print]).fit(X, y)


def test_a_run_stopped_by_a_progress_callback_ends_saved_at_that_step(binary_store, tmp_path):
    """The trainer's side, as ``pep train`` runs it: the stopped run's final checkpoint is written at the step
    it stopped (4 steps a checkpoint otherwise), with its evidence, and the run is finished, not converged."""
    def stop_at_3(event, **info):
        if event == "step" and info["step"] == 3:
            raise StopTraining("enough")

    result = train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / "run"), progress=stop_at_3)
    assert (result.steps, result.stopped, result.finished, result.reported_converged) == (3, "enough", True, False)
    assert [p.name for p in sorted((tmp_path / "run" / "checkpoints").iterdir())] == ["step-00000003"]
    run = load_run(tmp_path / "run")
    assert leaves_equal(run.trees["params"], result.params) and run.meta["log_marginal_likelihood"] is not None
    assert [record["step"] for record in result.history] == [3]  # the cut-short epoch is recorded


def test_without_early_stopping_a_fit_with_callbacks_is_bit_identical_to_the_trainer_s(rows):
    """The callbacks and the early-stopping fields leave the default path as it was: the estimator's energies
    and parameters are those of the trainer run directly on the same rows."""
    X, y = rows
    model = SparseGPClassifier(**SETTINGS, max_iter=6, early_stopping=False, callbacks=[Recorder()]).fit(X, y)
    energies = []
    trainer = Trainer(TrainJob(model.spec, ArrayData(X, y, "classification", 2), model._config(len(y)), None),
                      InProcess())
    result = trainer.run(progress=lambda event, **info: energies.append(info["energy"]) if event == "step" else None)
    assert energies == model.energy_trace_.tolist() and leaves_equal(result.params, model.params_)
    assert model.validation_scores_ is None and model.best_validation_score_ is None


@pytest.mark.heavy
def test_early_stopping_ends_at_the_best_validation_score_before_max_iter(rows):
    """Labels with a fifth flipped: the held-out NLL stops improving long before 300 steps; the fit ends at
    the parameters of its best score, which re-scoring the same stratified tenth of the rows reproduces."""
    X, y = rows
    noisy = np.where(np.random.default_rng(1).random(y.size) < 0.2, 1 - y, y)
    model = SparseGPClassifier(**{**SETTINGS, "tol": 1e-4}, max_iter=300, early_stopping=True, n_iter_no_change=3)
    model.fit(X, noisy)
    scores = model.validation_scores_
    assert model.n_iter_ < 300 and model.converged_ and model.stop_reason_ is None
    assert model.best_validation_score_ == min(scores) and scores[-1] > min(scores)  # the last is not the best
    assert len(scores) == model.n_iter_ // 4  # 172 training rows: 4 steps an epoch, one evaluation each
    _, x_validation, _, y_validation = train_test_split(X, noisy, test_size=0.1, random_state=0, stratify=noisy)
    rescored = model.calibration_report(x_validation, y_validation)["test_nll"]
    assert rescored == pytest.approx(model.best_validation_score_, rel=1e-9)


def test_validation_rows_are_scored_in_blocks_of_their_own_size_with_the_same_metrics(rows):
    """The 20 held-out rows of a fit on 172 are scored in one block of 32 rows, not one of the training blocks'
    48, and their metrics are those of the training blocks' size to rounding."""
    X, y = rows
    x_fit, x_validation, y_fit, y_validation = train_test_split(X, y, test_size=20, random_state=0, stratify=y)
    data = ArrayData(x_fit, y_fit, "classification", 2, held_out=(x_validation, y_validation))
    model = SparseGPClassifier(**SETTINGS)
    trainer = Trainer(TrainJob(model.spec, data, model._config(len(y_fit)), None), InProcess())
    assert (trainer.train.source.block_rows, trainer.test.source.block_rows) == (48, 32)
    params = trainer.fresh_state().params
    wide = Engine(InProcess(), data.blocks("test", 48, trainer.targets, statistics=trainer.frame.statistics))
    assert held_out_metrics(wide, trainer.held_out, params) == pytest.approx(trainer.evaluate(params), rel=1e-12)


@pytest.mark.parametrize("settings, message", [
    ({"validation_fraction": 1.5}, r"validation_fraction must lie in \(0, 1\); got 1.5"),
    ({"n_iter_no_change": 0}, "n_iter_no_change must be a positive integer; got 0"),
    ({"validation_fraction": 0.005}, "early_stopping cannot hold out validation_fraction=0.005 of 192 rows"),
])
def test_early_stopping_refuses_bad_settings_by_name(rows, settings, message):
    X, y = rows
    with pytest.raises(ValueError, match=f"SparseGPClassifier: {message}"):
        SparseGPClassifier(**SETTINGS, early_stopping=True, **settings).fit(X, y)


def test_early_stopping_needs_a_model_that_scores_held_out_rows(rows):
    """The collapsed regressor predicts from all its training rows: the trainer has no per-block predictive."""
    X, y = rows
    with pytest.raises(ValueError, match="CollapsedGPRegressor: early_stopping scores the validation rows by the "
                                         "model's predictive density, which collapsed-regressor does not have"):
        CollapsedGPRegressor(early_stopping=True).fit(X, y.astype(float))


@pytest.mark.heavy
def test_a_fit_logs_its_parameters_energies_and_final_metrics_to_mlflow(rows, tmp_path, monkeypatch):
    """Into a local ``file:`` tracking directory (MLflow 3 asks for ``MLFLOW_ALLOW_FILE_STORE`` there; ``pep
    train``'s test logs to a SQLite one)."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from pep_gp import MLflowLogger

    X, y = rows
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    logger = MLflowLogger(uri, experiment="tests", run_name="classifier")
    model = SparseGPClassifier(**SETTINGS, max_iter=6, callbacks=[logger]).fit(X, y)
    client = MlflowClient(uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "classifier"
    params = run.data.params
    assert (params["model"], params["model_settings.num_inducing"], params["config.batch_size"],
            params["config.max_steps"]) == ("sparse-gp-classifier", "6", "48", "6")
    energy = client.get_metric_history(logger.run_id, "energy")
    assert [m.step for m in energy] == list(range(1, 7)) and [m.value for m in energy] == model.energy_trace_.tolist()
    assert [m.step for m in client.get_metric_history(logger.run_id, "epoch/energy_per_row")] == [4, 6]
    assert run.data.metrics["final/log_marginal_likelihood"] == model.log_marginal_likelihood_value_
    assert run.data.metrics["final/n_iter"] == 6
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    with pytest.raises(InputError, match=r"^MLflowLogger: tracking URI 'file:.*': The filesystem tracking backend"):
        SparseGPClassifier(**SETTINGS, max_iter=1, callbacks=[MLflowLogger((tmp_path / "other").as_uri())]).fit(X, y)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    again = clone(model).fit(X, y)  # a clone logs its own run; a fitted estimator with its logger pickles
    assert again.callbacks[0].run_id not in (None, logger.run_id) and pickle.loads(pickle.dumps(model)).callbacks


def test_a_fit_logs_its_parameters_energies_and_final_metrics_to_tensorboard(rows, tmp_path):
    pytest.importorskip("tensorboardX")
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from pep_gp import TensorBoardLogger

    X, y = rows
    model = SparseGPClassifier(**SETTINGS, max_iter=6, callbacks=[TensorBoardLogger(tmp_path / "tb")]).fit(X, y)
    events = accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    energy = events.Scalars("energy")
    assert [e.step for e in energy] == list(range(1, 7))
    np.testing.assert_array_equal([e.value for e in energy], model.energy_trace_.astype(np.float32))
    assert [e.step for e in events.Scalars("epoch/energy_per_row")] == [4, 6]
    final = events.Scalars("final/log_marginal_likelihood")
    assert [(e.step, e.value) for e in final] == [(6, np.float32(model.log_marginal_likelihood_value_))]
    table = events.Tensors("params/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| model | sparse-gp-classifier |" in table and "| model_settings.num_inducing | 6 |" in table


def test_a_logger_without_its_package_names_the_extra_to_install(monkeypatch, tmp_path):
    from pep_gp import MLflowLogger, TensorBoardLogger
    from pep_gp.pipeline.training.tracking import loggers

    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # import mlflow.tracking: ImportError
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(InputError, match=r'^MLflowLogger needs mlflow, which is not installed: pip install "pep-gp\[tracking\]"$'):
        MLflowLogger()
    with pytest.raises(InputError, match=r"^TensorBoardLogger needs tensorboardX, which is not installed"):
        TensorBoardLogger(tmp_path)
    with pytest.raises(InputError, match="--log-to: expected mlflow, mlflow:URI or tensorboard:DIR, found 'wandb'"):
        loggers(["wandb"])
