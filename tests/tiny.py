"""The standard tiny shapes and settings of the tests that fit models only to see them run (scikit-learn's
contract, the registry-wide tests): 60 rows of 3 features, 5 inducing points, 3 classes.

A training block of up to 256 rows is padded to 256 (:func:`~pep_gp.pipeline.data.sizes.bucket`) and
predictions go in blocks of one size, so tests on these shapes and settings run the same compiled programs of a
model, which the processes that did not compile them load from the run's compilation cache (tests/conftest.py);
3 features are also the width of most of the fits scikit-learn's checks make."""

from __future__ import annotations

import numpy as np

ROWS, FEATURES, INDUCING, CLASSES = 60, 3, 5, 3

SETTINGS = {
    "SparseGPRegressor": {"num_inducing": INDUCING, "max_iter": 5},
    "SparseGPClassifier": {"num_inducing": INDUCING, "max_iter": 5},
    "HeteroscedasticGPRegressor": {"num_inducing": INDUCING, "max_iter": 20},  # 5, 10: R² under the checks' 0.5 (at their α = 0.01)
    # the class's contract on the paper's likelihood (what "auto" takes; the softmax, the same estimator class
    # and outputs at ~50× the step's cost, is fitted in tests/pipeline/test_likelihood_estimators.py)
    "OrdinalGPClassifier": {"num_inducing": INDUCING, "max_iter": 20},  # 5: 77 % right on three blobs
    "MultiClassGPClassifier": {"num_inducing": INDUCING, "max_iter": 20, "learning_rate": 0.1,
                               "likelihood": "pairwise"},
    # L-BFGS (not its default Adam steps): 5 iterations pass the checks' floor
    "DirectMultiClassGPClassifier": {"num_inducing": INDUCING, "max_iter": 5, "likelihood": "pairwise",
                                     "solver": "lbfgs"},
    "TiedEPClassifier": {"num_inducing": INDUCING, "max_iter": 20, "learning_rate": 0.1},
    "DeepGPRegressor": {"num_inducing": INDUCING, "max_iter": 60, "learning_rate": 0.05},  # 20 steps: R² < 0.5
    "DeepGPClassifier": {"num_inducing": INDUCING, "max_iter": 20, "learning_rate": 0.1},
    "MultiClassDeepGPClassifier": {"num_inducing": INDUCING, "max_iter": 20, "learning_rate": 0.1},  # 3: 33 % right
    "CollapsedGPRegressor": {"num_inducing": INDUCING, "max_iter": 5},
    "MultiOutputGPRegressor": {"num_inducing": INDUCING, "max_iter": 5},
    "ExactGPClassifier": {"max_iter": 2},
    "MultiClassEPClassifier": {"num_inducing": INDUCING, "max_iter": 10, "learning_rate": 0.1},
}
"""Each public estimator's settings at these shapes: the shortest fits that pass scikit-learn's accuracy floors
(``check_classifiers_train``: 83 % right on three blobs; ``check_regressors_train``: R² > 0.5), which its checks
fit dozens of times."""


def data() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The standard tiny data sets, by task: ``"regression"`` (``sin(x0)`` plus noise), ``"binary"`` (two text
    labels split by ``x0 > 0``) and ``"multiclass"`` (:data:`CLASSES` text labels by ``x0 > 0`` and ``x1 > 0.5``),
    each :data:`ROWS` × :data:`FEATURES` standard normal inputs."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(ROWS, FEATURES))
    labels = np.array(["cat", "dog", "eel"])
    return {"regression": (x, np.sin(x[:, 0]) + 0.1 * rng.normal(size=ROWS)),
            "binary": (x, labels[(x[:, 0] > 0).astype(int)]),
            "multiclass": (x, labels[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)])}
