"""Validation of in-memory user inputs at the estimator boundary, with messages that say where and what."""

from __future__ import annotations

import numpy as np


def _first_bad(a: np.ndarray) -> str:
    index = np.argwhere(~np.isfinite(a))[0]
    where = f"row {index[0]}" + (f", column {index[1]}" if a.ndim == 2 else "")
    return f"{where} (value {a[tuple(index)]})"


def check_features(x, name: str = "X", n_features: int | None = None) -> np.ndarray:
    """A finite float64 array [n_samples, n_features] with at least one row."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric; could not convert to float: {err}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [n_samples, n_features]; got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty; got shape {arr.shape}")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"{name} has {arr.shape[1]} features but the model was fitted with {n_features}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or Inf at {_first_bad(arr)}")
    return arr


def check_targets(y, n_rows: int, name: str = "y") -> np.ndarray:
    """A 1-D array of the same length as X (finite when numeric)."""
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array [n_samples]; got shape {arr.shape}")
    if arr.shape[0] != n_rows:
        raise ValueError(f"X and {name} have different numbers of rows: {n_rows} and {arr.shape[0]}")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or Inf at {_first_bad(arr)}")
    return arr


def check_num_inducing(num_inducing: int, inducing_points, n_rows: int, n_features: int) -> None:
    """Inducing inputs: either a positive count ≤ n_rows, or an explicit [M, n_features] array."""
    if inducing_points is not None:
        z = check_features(inducing_points, "inducing_points")
        if z.shape[1] != n_features:
            raise ValueError(f"inducing_points has {z.shape[1]} columns; the inputs have {n_features}")
        if z.shape[0] > n_rows:
            raise ValueError(f"inducing_points has {z.shape[0]} rows, more than the {n_rows} training rows")
        return
    if not isinstance(num_inducing, (int, np.integer)) or num_inducing < 1:
        raise ValueError(f"num_inducing must be a positive integer; got {num_inducing!r}")
    if num_inducing > n_rows:
        raise ValueError(f"num_inducing={num_inducing} exceeds the number of training rows ({n_rows})")


def check_class_labels(y, binary: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, encoded)``: the sorted class labels and ``y`` as integers ``0..C−1``.

    Requires discrete labels (scikit-learn's ``type_of_target``: a continuous ``y`` is refused) of at least
    two classes, or exactly two when ``binary``.
    """
    from sklearn.utils.multiclass import check_classification_targets, type_of_target  # 0.6 s to import: when used

    check_classification_targets(y)
    classes, encoded = np.unique(y, return_inverse=True)
    listed = ", ".join(map(str, classes[:10])) + (", ..." if classes.size > 10 else "")
    if classes.size < 2:
        raise ValueError(f"y has 1 class ({listed}); classification needs at least two")
    if binary and type_of_target(y, input_name="y", raise_unknown=True) != "binary":
        raise ValueError(f"Only binary classification is supported. The type of the target is "
                         f"{type_of_target(y)}: exactly two classes are needed; got {classes.size}: [{listed}]")
    return classes, encoded.astype(np.int64)
