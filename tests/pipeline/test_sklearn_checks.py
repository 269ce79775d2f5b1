"""scikit-learn's own contract test (``check_estimator``) for every pep estimator, with the few expected
failures declared on the estimator class (``_expected_failed_checks``: check name → reason)."""

from __future__ import annotations

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_estimator, estimator_checks_generator

import pep_gp
from tests import tiny

# Where the checks' time goes: each check fits on data of its own width (1 to 30 features, 1 to 4 classes: about ten
# widths per estimator) and every new width compiles the model's programs again, while rows are padded to one size
# (pep_gp.pipeline.data.sizes) and predictions go in blocks of one size; then each of the ~50 fits takes its max_iter
# steps or L-BFGS iterations (the exact-GP and untied EP programs are sized by the rows: a compilation per row count).
# Compiling dominates: MultiClassDeepGPClassifier's contract took 118 s of CPU under pytest with a fresh compilation
# cache and 56 s in a process whose cache held most of its programs (2 cores under load); with the programs cached,
# CollapsedGPRegressor's took 22 s at 20 L-BFGS iterations (11 s in 1,009 energy evaluations, 4 s predicting) and 8 s
# at 5. So the settings are the shortest fits that pass the checks' accuracy floors (tests/tiny.py: the deep
# multi-class classifier at 3 steps is 33 % right on three blobs), and the whole contract stays out of the default
# tier: it runs in .ci/run for the collapsed regressor (40 s on 2 cores at a load of 25: a fit of its own, and
# the regressor checks with the same estimator classes as the trainer's regressors). One classifier through the
# trainer (multi-class SEP's, whose checks fit binary and multi-class labels: 114 s), the multi-class deep GP (the trainer's deep path with a
# predictive of its own; it passes every check), exact EP, untied multi-class EP and the multi-output regressor
# (53 checks in 69–212 s on 2 loaded cores), whose fits are their own, and
# the others, the same estimator classes over another model spec, take the whole contract with -m exhaustive
# (.ci/run's 25 minutes leave no room for them). In the default tier every
# estimator takes the fit-free checks below, and fits, predicts and round-trips at the tiny shapes
# (tests/pipeline/test_tiny_estimators.py; the costliest five there are heavy).
SHARING = ["SparseGPRegressor", "HeteroscedasticGPRegressor", "SparseGPClassifier", "OrdinalGPClassifier",
           "DirectMultiClassGPClassifier", "TiedEPClassifier", "DeepGPRegressor", "DeepGPClassifier"]
OWN = ["MultiClassGPClassifier", "CollapsedGPRegressor", "ExactGPClassifier", "MultiClassEPClassifier",
       "MultiClassDeepGPClassifier", "MultiOutputGPRegressor"]
IN_CI = ["CollapsedGPRegressor"]
NAMES = [name if name in IN_CI else pytest.param(name, marks=pytest.mark.exhaustive) for name in [*OWN, *SHARING]]


def estimator(name: str):
    return getattr(pep_gp, name)(**tiny.SETTINGS[name])


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


@pytest.mark.exhaustive
@pytest.mark.slow
def test_a_kernel_object_passes_the_parameter_checks():
    """A kernel object as a constructor argument passes scikit-learn's checks of cloning, get_params,
    set_params, repr and pickling (readonly memory maps included)."""
    from pep_gp.kernels import Linear, Matern52

    run_checks(pep_gp.SparseGPRegressor(kernel=Matern52(variance=1.5) + Linear(0.1), num_inducing=5, max_iter=20,
                                        learning_rate=0.1), PARAMETER_CHECKS)


@pytest.mark.parametrize("name", [*OWN, *SHARING])
def test_every_estimator_passes_the_constructor_checks(name):
    """Each estimator's own constructor (its parameters, defaults and repr) against scikit-learn's rules: what
    the whole contract checks of it without fitting (its fits at the tiny shapes: test_tiny_estimators.py)."""
    run_checks(estimator(name), CONSTRUCTOR_CHECKS)
