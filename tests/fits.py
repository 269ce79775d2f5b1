"""Fitting an estimator inside a test: a fit of a few steps ends before its stopping rule says converged, so
scikit-learn's ``ConvergenceWarning`` is silenced where the test is about something else."""

from __future__ import annotations

import warnings

from sklearn.exceptions import ConvergenceWarning


def fit(estimator, x, y):
    """``estimator.fit(x, y)`` without its ``ConvergenceWarning``; returns the fitted estimator."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(x, y)
