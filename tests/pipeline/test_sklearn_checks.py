"""scikit-learn's own contract test (``check_estimator``) for every pep estimator, with the few expected
failures declared on the estimator class (``_expected_failed_checks``: check name → reason)."""

from __future__ import annotations

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_estimator, estimator_checks_generator

import pep_gp

# Small models, the shortest fits that still pass the checks' accuracy floors (check_classifiers_train,
# check_regressors_train): the checks fit each estimator dozens of times on toy data.
SETTINGS = {"ExactGPClassifier": {"max_iter": 5},
            # the class's contract, on the paper's likelihood: "auto" takes the softmax on data this small (the
            # same estimator class and outputs; tests/pipeline/test_likelihood_estimators.py fits it), at ~50×
            # the step's cost over the checks' dozens of fits
            "MultiClassGPClassifier": {"num_inducing": 5, "max_iter": 20, "learning_rate": 0.1,
                                       "likelihood": "pairwise"},
            "DeepGPRegressor": {"num_inducing": 5, "max_iter": 60, "learning_rate": 0.05}}  # 20 steps fail R² > 0.5
# The whole contract runs in .ci/run for one classifier through the trainer (multi-class SEP's, whose checks fit
# binary and multi-class labels) and for each estimator with a fit of its own (the collapsed regressor, which
# takes the regressor checks with the same estimator classes as the trainer's regressors; exact EP; untied
# multi-class EP). The others are the same estimator classes over another model spec (the trainer's, with models
# that tests/test_models.py and the registry's tests check): they take the constructor checks below (quick
# tier), and the whole contract with -m exhaustive.
SHARING = ["SparseGPRegressor", "SparseGPClassifier", "DirectMultiClassGPClassifier", "TiedEPClassifier",
           "DeepGPRegressor", "DeepGPClassifier"]
NAMES = ["MultiClassGPClassifier", "CollapsedGPRegressor", "ExactGPClassifier", "MultiClassEPClassifier",
         *(pytest.param(name, marks=pytest.mark.exhaustive) for name in SHARING)]


def estimator(name: str):
    return getattr(pep_gp, name)(**SETTINGS.get(name, {"num_inducing": 5, "max_iter": 20, "learning_rate": 0.1}))


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", NAMES)
def test_check_estimator(name):
    expected = getattr(getattr(pep_gp, name), "_expected_failed_checks", {})
    assert len(expected) <= 3 and all(reason for reason in expected.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        results = check_estimator(estimator(name), expected_failed_checks=expected, on_skip=None, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:300]) for r in results if r["status"] == "failed"]
    assert not failed
    assert len(results) > 40


# The checks a constructor argument's type can fail: cloning, parameters, repr and pickling (the others fit on
# toy data, as the ten runs above do for the same estimator with its default kernel).
PARAMETER_CHECKS = {"check_estimator_cloneable", "check_estimator_repr", "check_no_attributes_set_in_init",
                    "check_parameters_default_constructible", "check_get_params_invariance", "check_set_params",
                    "check_do_not_raise_errors_in_init_or_set_params", "check_dont_overwrite_parameters",
                    "check_estimators_overwrite_params", "check_fit_idempotent", "check_estimators_pickle"}


CONSTRUCTOR_CHECKS = PARAMETER_CHECKS - {"check_dont_overwrite_parameters", "check_estimators_overwrite_params",
                                         "check_fit_idempotent", "check_estimators_pickle"}
"""Those of them that fit nothing."""


def run_checks(estimator, names: set[str]) -> None:
    """Run scikit-learn's checks ``names`` on ``estimator``; each raises on a failure."""
    ran = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for instance, check in estimator_checks_generator(estimator, legacy=True, mark="skip"):
            name = getattr(check, "func", check).__name__
            if name in names:
                check(instance)
                ran.append(name)
    assert set(ran) == names


@pytest.mark.slow
def test_a_kernel_object_passes_the_parameter_checks():
    """A kernel object as a constructor argument passes scikit-learn's checks of cloning, get_params,
    set_params, repr and pickling (readonly memory maps included)."""
    from pep_gp.kernels import Linear, Matern52

    run_checks(pep_gp.SparseGPRegressor(kernel=Matern52(variance=1.5) + Linear(0.1), num_inducing=5, max_iter=20,
                                        learning_rate=0.1), PARAMETER_CHECKS)


@pytest.mark.parametrize("name", SHARING)
def test_an_estimator_sharing_a_path_passes_the_constructor_checks(name):
    """Each estimator's own constructor (its parameters, defaults and repr) against scikit-learn's rules: what
    the whole contract checks of it beyond the path it shares with another estimator."""
    run_checks(estimator(name), CONSTRUCTOR_CHECKS)
