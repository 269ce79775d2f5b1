"""Fitted estimators persist: joblib files load in a fresh process and predict bit-identically, and runs
are models (``estimator.save`` ↔ ``pep_gp.load``; a ``pep train`` run loads as its estimator)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import joblib
import numpy as np
import pytest

import pep_gp
from pep_gp import load
from pep_gp.pipeline.errors import InputError
from tests.trainstores import PAIRWISE

ALL = ["SparseGPRegressor", "SparseGPClassifier", "MultiClassGPClassifier", "DirectMultiClassGPClassifier",
       "TiedEPClassifier", "DeepGPRegressor", "DeepGPClassifier", "CollapsedGPRegressor", "ExactGPClassifier",
       "MultiClassEPClassifier"]


def _data(name: str):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, 3))
    if "Regressor" in name:
        return x, np.sin(x[:, 0]) + 0.1 * rng.normal(size=60)
    labels = np.array(["cat", "dog", "eel"])
    return x, labels[(x[:, 0] > 0).astype(int) + ("MultiClass" in name) * (x[:, 1] > 0.5).astype(int)]


def _fitted(name: str, **settings):
    kw = {"max_iter": 10} if name == "ExactGPClassifier" else {"num_inducing": 5, "max_iter": 10, "tol": 0}
    return getattr(pep_gp, name)(**kw, **settings).fit(*_data(name))


def _outputs(model, x):
    return model.predict_proba(x) if hasattr(model, "predict_proba") else np.stack(model.predict(x, return_std=True))


SHARING = ["DirectMultiClassGPClassifier", "TiedEPClassifier", "DeepGPRegressor"]
"""Estimators whose predictive another estimator's shares (multi-class SEP's, the binary classifier's, the deep
classifier's). Both groups -m exhaustive: in .ci/run each public estimator round-trips at the tiny shapes
(tests/pipeline/test_tiny_estimators.py)."""


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(1800)  # the fits, and a fresh process that compiles their predictives
@pytest.mark.parametrize("names", [[name for name in ALL if name not in SHARING],
                                   pytest.param(SHARING, marks=pytest.mark.exhaustive)], ids=["own", "sharing"])
def test_joblib_files_predict_bit_identically_in_a_fresh_process(tmp_path, names):
    x = np.random.default_rng(5).normal(size=(17, 3))
    np.save(tmp_path / "x.npy", x)
    for name in names:  # the multi-class ones on eq. (6), stated: a softmax pickles as the same class (loaded below)
        model = _fitted(name, **(PAIRWISE if name in ("MultiClassGPClassifier", "DirectMultiClassGPClassifier") else {}))
        joblib.dump(model, tmp_path / f"{name}.joblib")
        np.save(tmp_path / f"{name}.expected.npy", _outputs(model, x))
    script = textwrap.dedent(f"""
        import joblib, numpy as np
        x = np.load({str(tmp_path / 'x.npy')!r})
        for name in {names!r}:
            model = joblib.load({str(tmp_path)!r} + f"/{{name}}.joblib")
            out = model.predict_proba(x) if hasattr(model, "predict_proba") else np.stack(model.predict(x, return_std=True))
            np.save({str(tmp_path)!r} + f"/{{name}}.loaded.npy", out)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=1500)
    for name in names:
        expected, loaded = (np.load(tmp_path / f"{name}.{kind}.npy") for kind in ("expected", "loaded"))
        assert loaded.dtype == np.float64 and loaded.tobytes() == expected.tobytes(), name


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("name", ["SparseGPClassifier", "MultiClassGPClassifier", "SparseGPRegressor"])
def test_a_saved_estimator_loads_as_itself(name, tmp_path):
    """The loaded estimator has the saved one's parameters (the multi-class one's ``likelihood="auto"`` too, not
    what auto chose) and predictions, and saves and warm-starts in turn."""
    model = _fitted(name)
    model.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    x = np.random.default_rng(6).normal(size=(9, 3))
    assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
    assert _outputs(loaded, x).tobytes() == _outputs(model, x).tobytes()
    if hasattr(model, "classes_"):
        assert list(loaded.classes_) == list(model.classes_) and set(loaded.predict(x)) <= set(model.classes_)
    with pytest.raises(InputError, match="already holds a run"):
        model.save(tmp_path / "run")
    loaded.save(tmp_path / "again")  # a loaded estimator saves and warm-starts as the fitted one (it kept no frame)
    assert _outputs(load(tmp_path / "again"), x).tobytes() == _outputs(model, x).tobytes()
    warmed = loaded.set_params(warm_start=True, max_iter=1).fit(*_data(name))
    assert warmed.n_iter_ == 1 and type(warmed.model_) is type(model.model_)


@pytest.mark.heavy
def test_a_run_of_another_parameterisation_is_refused_naming_both(tmp_path):
    import json

    model = _fitted("SparseGPClassifier")
    path = model.save(tmp_path / "run")
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "parameterisation": "1"}))
    with pytest.raises(InputError, match="the run stores parameterisation '1'; this version of pep reads '3'"):
        load(tmp_path / "run")
    (path / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))
    with pytest.raises(InputError, match="checkpoint format 2; this version of pep reads format 1"):
        load(tmp_path / "run")
    with pytest.raises(TypeError, match="save it with joblib"):
        _fitted("CollapsedGPRegressor").save(tmp_path / "other")


def test_a_pep_train_run_loads_with_its_step_budget_and_the_stopping_verdict(binary_store, tmp_path):
    """Issue 37: a `pep train` run loaded with `max_iter` its checkpoint's step (not the run's budget) and
    `converged_` None (its manifest did not record the stopping rule's verdict)."""
    from pep_gp.pipeline.engine import InProcess
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob
    from tests.trainstores import FAST

    config = FAST.model_copy(update={"epochs": 1, "checkpoint_every": 100})  # 5 steps
    Trainer(TrainJob("sparse-gp-classifier", binary_store, config, tmp_path), InProcess()).run(until_step=3)
    loaded = load(tmp_path)
    assert (loaded.n_iter_, loaded.max_iter, loaded.converged_) == (3, 5, False)


def test_a_pep_train_run_loads_with_the_log_marginal_likelihood_of_its_final_parameters(binary_store, tmp_path):
    """Issue 37, item 8: a `pep train` run loaded with a NaN `log_marginal_likelihood_value_`; the checkpoint
    that ends a run now records it (a run cut short, or one written before, still loads NaN)."""
    from pep_gp.pipeline.engine import InProcess
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob
    from tests.trainstores import FAST

    config = FAST.model_copy(update={"epochs": 1, "checkpoint_every": 100})  # 5 steps
    trainer = Trainer(TrainJob("sparse-gp-classifier", binary_store, config, tmp_path), InProcess())
    trainer.run(until_step=3)
    assert np.isnan(load(tmp_path).log_marginal_likelihood_value_)
    result = trainer.run()
    loaded = load(tmp_path)
    assert np.isfinite(loaded.log_marginal_likelihood_value_)
    assert loaded.log_marginal_likelihood() == pytest.approx(trainer.log_marginal_likelihood(result.params), rel=1e-12)
