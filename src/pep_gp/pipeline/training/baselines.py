"""Reference models to read pep's metrics against: logistic regression and the majority class.

They hold the whole training split in memory, which is fine for the bundled demo data (264k × 8);
they are baselines, not part of the scalable path.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from ..metrics import test_error, test_nll
from ..data.stores import Store


def _standardised(store: Store, split: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = (a[:] for a in store.arrays(split))
    mean, std = np.asarray(store.attrs["x_mean"]), np.asarray(store.attrs["x_std"])
    return (x.astype(np.float64) - mean) / std, y


def classification_baselines(store: Store, seed: int = 0) -> list[dict[str, Any]]:
    """Test error and NLL of L2 logistic regression (scikit-learn defaults, inputs standardised with
    the training statistics) and of always predicting the training split's class frequencies."""
    x_train, y_train = _standardised(store, "train")
    x_test, y_test = _standardised(store, "test")
    started = time.perf_counter()
    model = LogisticRegression(max_iter=1000, random_state=seed).fit(x_train, y_train)
    logistic = {"model": "logistic regression", "test_error": test_error(y_test, model.predict(x_test)),
                "test_nll": test_nll(y_test, model.predict_proba(x_test)),
                "seconds": round(time.perf_counter() - started, 3)}
    frequencies = np.bincount(y_train, minlength=store.n_classes) / len(y_train)
    prior = {"model": "majority class / class frequencies",
             "test_error": test_error(y_test, np.full(len(y_test), frequencies.argmax())),
             "test_nll": test_nll(y_test, np.tile(frequencies, (len(y_test), 1))), "seconds": 0.0}
    return [logistic, prior]
