"""Estimators fitted from a pep store: ``SparseGPClassifier().fit("data.zarr")`` trains on the store's own
training split and targets, block by block, as ``pep train`` does (:meth:`GPEstimator.fit
<pep_gp.pipeline.estimators.base.GPEstimator.fit>`), so data larger than memory reaches the estimators too.

This module opens and checks the store an estimator is given (:func:`opened_store`) and says how the fitted
estimator then reads new rows (:func:`table_reading`): as a run of the store reads them (``pep predict``,
``pep_gp.load``), a DataFrame of the table's own columns transformed as at ingest.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..data.stores import Store, open_store
from ..data.transforms import Transforms
from ..errors import InputError


def is_store(X: Any) -> bool:
    """Whether ``X`` names a store (a path, as ``str`` or ``os.PathLike``, or an opened :class:`Store`) rather
    than holding rows."""
    return isinstance(X, (str, os.PathLike, Store))


def opened_store(estimator: str, X: Any, y: Any, task: str, several_targets: bool = False) -> Store:
    """The validated store ``X`` names, for an estimator of ``task`` (of one target per row unless
    ``several_targets``).

    Raises:
        ValueError: ``y`` is given (the store holds its targets).
        InputError: ``X`` is not a pep store (:func:`~pep_gp.pipeline.data.stores.open_store`'s reasons), or
            holds another task than ``task``, or several targets for an estimator of one; each message starts
            with ``estimator``.
    """
    if y is not None:
        raise ValueError(f"{estimator}: y must be None when X is a store ({os.fspath(getattr(X, 'path', X))}): "
                         "the store holds its own targets")
    try:
        store = X if isinstance(X, Store) else open_store(X)
    except InputError as error:
        raise InputError(f"{estimator}: {error}") from None
    if store.task != task:
        kind = "classifier" if task == "classification" else "regressor"
        raise InputError(f"{estimator}: {store.path} holds a {store.task} task, but {estimator} is a {kind}: "
                         f"it fits a {task} store (`pep ingest ... --task {task}`)")
    if store.n_targets > 1 and not several_targets:
        raise InputError(f"{estimator}: {store.path} holds {store.n_targets} targets per row "
                         f"({', '.join(map(repr, store.target_names))}); {estimator} fits one "
                         "(MultiOutputGPRegressor fits several)")
    return store


def table_reading(transforms: Transforms | None, feature_names: list[str] | None) -> dict[str, Any]:
    """The fitted attributes by which an estimator reads new rows as those of its training table:
    ``transforms_`` where the table's columns became features through one-hot, time or offset columns
    (``predict`` then takes a DataFrame of the table's columns, or an array of its features' raw values),
    else ``feature_names_in_`` where the features have names of their own (not ``x0, x1, …``); none
    otherwise (nor for ``transforms`` None: a run written before records had them)."""
    if transforms is not None and not transforms.is_identity:
        return {"transforms_": transforms}
    if feature_names and feature_names != [f"x{j}" for j in range(len(feature_names))]:
        return {"feature_names_in_": np.asarray(feature_names, dtype=object)}
    return {}


__all__ = ["is_store", "opened_store", "table_reading"]
