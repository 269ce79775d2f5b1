"""Every public estimator (the estimator of every registered model and the three with fits of their own) at the
standard tiny shapes and settings (:mod:`tests.tiny`): it fits, predicts what its task promises, and a pickle,
a saved run and a refit all predict the same bits (in the default tier, but for the costliest five:
:data:`HEAVY`). A model added to the registry, or an estimator added to ``pep_gp``, is tested here without a
line of its own."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import RegressorMixin, clone, is_classifier

import pep_gp
from pep_gp.kernels import Kernel
from pep_gp.pipeline.estimators.collapsed import ConditionsOnItsRows
from pep_gp.pipeline.estimators.fitted import FittedGP
from pep_gp.pipeline.estimators.models import built_in
from tests import tiny

PUBLIC = sorted(name for name in pep_gp.__all__
                if isinstance(getattr(pep_gp, name), type) and issubclass(getattr(pep_gp, name), FittedGP))
HEAVY = {"DeepGPClassifier", "MultiClassDeepGPClassifier", "DirectMultiClassGPClassifier", "DeepGPRegressor",
         "SparseGPClassifier", "OrdinalGPClassifier", "HeteroscedasticGPRegressor", "MultiClassEPClassifier"}
"""The estimators whose test here costs the most (compiling their programs: 147, 146, 97, 70 and 61 s of a
two-core machine under a load of 15, against 18–68 s for the others, ~126 s of CPU for all eleven): the heavy
tier, so that the default tier's share stays near 40 s. Those kept cover every way through the estimators: the
trainer with site updates (TiedEPClassifier, MultiClassGPClassifier), by L-BFGS (SparseGPRegressor), the
collapsed regressor, and ExactGPClassifier's fit of its own (MultiClassEPClassifier's, 15–20 s, is heavy with
the deep GPs: .ci/run leaves the deep classifiers' to releases, DeepGPRegressor's stays). OrdinalGPClassifier takes the sparse GP's path with
another likelihood (its own fit: tests/pipeline/test_ordinal.py); HeteroscedasticGPRegressor the Power-EP energy of a
bank of two GPs (its own fit: tests/pipeline/test_heteroscedastic.py)."""


def test_every_registered_model_and_public_estimator_has_tiny_settings():
    """The registry's estimators are public, and each public estimator has its tiny settings (so the
    parametrised tests below, and scikit-learn's contract in test_sklearn_checks.py, cover it)."""
    assert {cls.__name__ for cls in built_in().values()} <= set(PUBLIC)
    assert set(PUBLIC) == set(tiny.SETTINGS)


def _outputs(model, x) -> np.ndarray:
    return model.predict_proba(x) if is_classifier(model) else np.stack(model.predict(x, return_std=True))


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.heavy) if name in HEAVY else name
                                  for name in PUBLIC])
def test_every_public_estimator_fits_predicts_and_round_trips_at_the_tiny_shapes(name, tiny_data, tmp_path):
    cls = getattr(pep_gp, name)
    task = "regression" if issubclass(cls, RegressorMixin) else "binary" if cls._binary else "multiclass"
    x, y = tiny_data[task]
    model = cls(**{**tiny.SETTINGS[name], "max_iter": 2}).fit(x, y)
    assert 1 <= model.n_iter_ <= 2 and model.n_features_in_ == tiny.FEATURES
    rows = np.random.default_rng(6).normal(size=(9, tiny.FEATURES))
    outputs = _outputs(model, rows)
    if is_classifier(model):
        assert list(model.classes_) == sorted(set(y)) and outputs.shape == (9, len(model.classes_))
        np.testing.assert_allclose(outputs.sum(axis=1), 1.0, rtol=1e-12)
        assert set(model.predict(rows)) <= set(model.classes_)
    else:
        assert np.all(np.isfinite(outputs)) and np.all(outputs[1] > 0)  # means and standard deviations
    kernels = model.kernel_ if isinstance(model.kernel_, tuple) else (model.kernel_,)  # a deep GP's: per layer
    assert kernels and all(isinstance(kernel, Kernel) for kernel in kernels)
    if not is_classifier(model) and name != "DeepGPRegressor":
        # far from the data (every kernel value 0) the predictive mean is the prior's, mean_function_: the zero
        # mean of standardised targets, the training targets' mean (a deep GP's output layer sees its hidden
        # layers' prior there, not a far point)
        far = np.full((2, tiny.FEATURES), 1e3)
        np.testing.assert_allclose(model.predict(far), np.full(2, np.mean(y)), rtol=1e-12)
        np.testing.assert_allclose(model.mean_function_(far), np.full(2, np.mean(y)), rtol=1e-12)
    assert _outputs(pickle.loads(pickle.dumps(model)), rows).tobytes() == outputs.tobytes()
    assert _outputs(clone(model).fit(x, y), rows).tobytes() == outputs.tobytes()  # a refit: the same bits
    if hasattr(model, "save") and type(model).save is not ConditionsOnItsRows.save:  # the collapsed regressor's: joblib only
        model.save(tmp_path / "run")
        loaded = pep_gp.load(tmp_path / "run")
        assert type(loaded) is cls and _outputs(loaded, rows).tobytes() == outputs.tobytes()
