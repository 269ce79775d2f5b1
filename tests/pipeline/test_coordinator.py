"""The coordinator in-process: training, segments and resume, refusals, evaluation, rejected steps,
damped site updates."""

from __future__ import annotations

import numpy as np
import pytest

from pep_gp.pipeline.runs import checkpoint
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from pep_gp.pipeline.runs.run import evaluate
from pep_gp.pipeline.errors import InputError, TrainingFailed
from pep_gp.pipeline.models import MODELS
from tests.pipeline.toy_model import ToySpec
from tests.trainstores import FAST, leaves_equal, make_store


def job(store, run_dir, model="sparse-gp-classifier", settings=None, **changes):
    model_settings = {**FAST.model, **(settings or {})}
    return TrainJob(model, store, FAST.model_copy(update={**changes, "model": model_settings}), run_dir)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_classifier_learns_and_leaves_checkpoints(binary_store, tmp_path):
    events = []
    result = train(job(binary_store, tmp_path, epochs=4), progress=lambda e, **i: events.append(e))
    assert (result.steps, result.total_steps, result.epochs, result.rejected_steps) == (20, 20, 4, 0)
    assert result.finished and result.checkpoint == tmp_path / "checkpoints" / "step-00000020"
    energies = [r["energy"] for r in result.history]
    assert energies[-1] > energies[0]
    y_test = binary_store.arrays("test")[1][:]
    majority_error = min(y_test.mean(), 1 - y_test.mean())
    assert result.metrics["n_test"] == 100 and result.metrics["test_error"] < majority_error - 0.1
    assert events.count("epoch") == 4 and events.count("step") == 20 and events[0] == "start"
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == ["step-00000016", "step-00000020"]  # every 4 steps and at the end, newest 2 kept
    evaluation = evaluate(tmp_path)  # the trainer's last held-out metrics, and the calibration report beside them
    assert {key: evaluation[key] for key in result.metrics} == result.metrics
    assert (evaluation["step"], evaluation["checkpoint"]) == (20, str(result.checkpoint))
    assert {"brier", "ece", "ece_binning", "reliability"} <= set(evaluation)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_segments_and_resume_are_bit_identical(binary_store, tmp_path):
    whole = train(job(binary_store, tmp_path / "whole"))
    first = train(job(binary_store, tmp_path / "parts"), until_step=7)
    assert first.steps == 7 and not first.finished and (tmp_path / "parts/checkpoints/step-00000007").exists()
    rest = train(job(binary_store, tmp_path / "parts"), resume=True)
    assert rest.steps == 15 and leaves_equal(rest.params, whole.params)
    strip = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]
    assert strip(rest.history) == strip(whole.history)


@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_more_epochs_continue_a_finished_run(binary_store, tmp_path):
    longer = train(job(binary_store, tmp_path / "a", epochs=4))
    train(job(binary_store, tmp_path / "b", epochs=2))
    continued = train(job(binary_store, tmp_path / "b", epochs=4), resume=True)
    assert leaves_equal(continued.params, longer.params)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_resume_refusals(binary_store, tmp_path):
    train(job(binary_store, tmp_path), until_step=4)
    with pytest.raises(InputError, match="already holds checkpoints; pass --resume"):
        train(job(binary_store, tmp_path))
    with pytest.raises(InputError, match=r"cannot resume with a different config \(learning_rate: 0.05 → 0.1"):
        train(job(binary_store, tmp_path, learning_rate=0.1), resume=True)
    other = make_store(tmp_path / "other.zarr", seed=1)
    with pytest.raises(InputError, match="this run was trained on .*binary.zarr .*not on .*other.zarr"):
        train(job(other, tmp_path), resume=True)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_model_must_fit_the_store(binary_store, regression_store, tmp_path):
    with pytest.raises(InputError, match="needs a regression store; this store holds a classification task"):
        train(job(binary_store, tmp_path, model="sparse-gp-regressor"))
    with pytest.raises(InputError, match="unknown model 'gp'; expected one of sparse-gp-regressor, "):
        train(job(binary_store, tmp_path, model="gp"))
    capped = train(job(regression_store, tmp_path / "capped", model="sparse-gp-regressor", epochs=1,
                       settings={"num_inducing": 500}))
    assert capped.notes == ("num_inducing = 500 capped at the 400 training rows, which are the inducing inputs, kept fixed; "
                            "alpha = 0 there (was 0.5)",)
    with pytest.raises(InputError, match=r"invalid settings of --model sparse-gp-classifier: model.alpha"):
        train(job(binary_store, tmp_path, settings={"alpha": 2.0}))


@pytest.mark.exhaustive
@pytest.mark.slow
def test_regressor_reports_rmse_in_target_units(regression_store, tmp_path):
    # 20 inducing inputs (fixed at a subset of the rows): FAST's 6 leave sin(2x) in 3-D underfitted
    result = train(job(regression_store, tmp_path, model="sparse-gp-regressor", epochs=6,
                       settings={"num_inducing": 20}))
    y_test = regression_store.arrays("test")[1][:]
    assert result.metrics["rmse"] < 0.6 * np.std(y_test)  # sin(2x) + 0.1 noise: most variance explained
    assert set(evaluate(tmp_path)) == {"rmse", "test_nll", "n_test", "step", "checkpoint", "crps", "coverage_50",
                                       "coverage_90", "coverage_95", "scored_data", "scored_checksum",
                                       "training_data"}  # which data was scored (issue 62, item 5)


@pytest.mark.heavy
def test_evaluate_on_another_store_uses_the_training_statistics(binary_store, tmp_path):
    train(job(binary_store, tmp_path))
    other = make_store(tmp_path / "other.zarr", seed=1)
    assert evaluate(tmp_path, other.path)["n_test"] == 100
    wide = make_store(tmp_path / "wide.zarr", n_features=4)
    with pytest.raises(InputError, match="wide.zarr: has 'x3', which the run was not trained on"):
        evaluate(tmp_path, wide.path)
    with pytest.raises(InputError, match="no complete checkpoint"):
        evaluate(tmp_path / "nothing")


def test_a_run_idling_on_rejected_steps_stops_with_an_error(regression_store, tmp_path, monkeypatch):
    """Audit (issue 27): at learning rate 100, 59 of 60 steps were rejected and the run exited 0 with a NaN
    test NLL. Here the first step jumps past the toy's NaN trap and every later step is rejected: the run
    stops after ``max_rejected_in_a_row`` of them, its checkpoint holding the last accepted parameters,
    and a run too short for the stop rule fails on its non-finite final energy."""
    monkeypatch.setitem(MODELS, "toy", ToySpec(nan_above=0.01))
    with pytest.raises(TrainingFailed, match=r"training stopped at step 6 of 50: the last 5 steps were all rejected "
                                             r"\(non-finite energy or gradient; 5 rejected in all\).*the learning rate "
                                             r"\(0.05\) is likely too large"):
        train(job(regression_store, tmp_path, model="toy", learning_rate=0.05, epochs=10, max_rejected_in_a_row=5))
    stopped = checkpoint.restore(tmp_path, lambda manifest: {"params": {"w": 0.0, "post_mean": 0.0}})
    assert stopped.step == 6 and stopped.meta["rejected_steps"] == 5
    assert np.isfinite(stopped.trees["params"]["w"]) and 0.01 < abs(stopped.trees["params"]["w"]) <= 0.01 + 0.05
    with pytest.raises(TrainingFailed, match=r"training ended at step 10 with non-finite energy \(9 of 10 steps "
                                             r"rejected as non-finite\)"):
        train(job(regression_store, tmp_path / "short", model="toy", learning_rate=0.05, epochs=2))


def test_a_run_whose_start_is_not_finite_says_so_not_that_the_learning_rate_is_too_large(regression_store, tmp_path,
                                                                                         monkeypatch):
    """A data term that is NaN at the starting parameters rejects every step from the first: no learning rate
    mends that, and the error says where the fault is."""
    monkeypatch.setitem(MODELS, "toy", ToySpec(nan_above=-1.0))
    with pytest.raises(TrainingFailed, match=r"training stopped at step 5 of 50: every step was rejected "
                                             r"\(non-finite energy or gradient at the starting parameters\)") as failed:
        train(job(regression_store, tmp_path, model="toy", epochs=10, max_rejected_in_a_row=5))
    assert "learning rate" not in str(failed.value)


@pytest.mark.heavy
@pytest.mark.parametrize("damping", [1.0, 0.5])
def test_damped_site_updates(regression_store, tmp_path, monkeypatch, damping):
    """Full-batch steps: post_mean_t = (1 − (1 − ρ)^t) Σy/(1 + N) exactly as the damped recursion."""
    monkeypatch.setitem(MODELS, "toy", ToySpec())
    config = dict(model="toy", batch_size=400, block_rows=400, epochs=3)
    result = train(job(regression_store, tmp_path, settings={"damping": damping}, **config))
    y = regression_store.arrays("train")[1][:].astype(float)
    target = y.sum() / (1 + len(y))
    np.testing.assert_allclose(result.params["post_mean"], target * (1 - (1 - damping) ** 3), rtol=1e-12)
    assert checkpoint.has_checkpoints(tmp_path)


@pytest.mark.heavy
def test_segments_continue_silently_and_only_a_resume_says_resumed(binary_store, tmp_path):
    """The flow trains in per-epoch segments on one trainer: later segments continue in memory and do not
    report a resume; a new trainer asked to resume reports the checkpoint it resumed from."""
    starts = []
    record = lambda event, **info: starts.append(info["resumed_from"]) if event == "start" else None
    trainer = Trainer(job(binary_store, tmp_path), InProcess())
    segments = [trainer.run(segment_steps=5, progress=record) for _ in range(3)]
    assert [s.steps for s in segments] == [5, 10, 15] and segments[-1].finished and starts == [None, None, None]
    train(job(binary_store, tmp_path, epochs=4), resume=True, progress=record)
    assert starts[-1] == tmp_path / "checkpoints" / "step-00000015"
