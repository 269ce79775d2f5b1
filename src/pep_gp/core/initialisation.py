"""Data-driven starting values for kernels and inducing inputs (the code of Bui, Yan & Turner 2017,
``init_hypers``): median-distance lengthscales and k-means inducing inputs; and the multi-class
reference code's lengthscale (Villacampa-Calvo & Hernández-Lobato 2017, §4.4)."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.spatial.distance import pdist

MAX_ROWS = 5_000


def _subsample(x: np.ndarray, seed: int, size: int = MAX_ROWS) -> np.ndarray:
    if x.shape[0] <= size:
        return x
    return x[np.random.default_rng(seed).choice(x.shape[0], size, replace=False)]


def median_lengthscale(x: np.ndarray, seed: int = 0) -> float:
    """Half the median pairwise distance of (a subsample of) the inputs; 1.0 if degenerate."""
    distances = pdist(_subsample(np.asarray(x, dtype=float), seed, 2_000))
    value = 0.5 * float(np.median(distances)) if distances.size else 1.0
    return value if np.isfinite(value) and value > 1e-6 else 1.0


def squared_median_lengthscale(x: np.ndarray, seed: int = 0) -> float:
    """``√median`` of the pairwise distances of 1,000 random rows: Villacampa-Calvo & Hernández-Lobato's (2017) MNIST driver sets the
    *squared* lengthscale to the median distance (Villacampa-Calvo & Hernández-Lobato 2017, §4.4); 1.0 if degenerate."""
    distances = pdist(_subsample(np.asarray(x, dtype=float), seed, 1_000))
    value = float(np.sqrt(np.median(distances))) if distances.size else 1.0
    return value if np.isfinite(value) and value > 1e-6 else 1.0


def kmeans_inducing(x: np.ndarray, num_inducing: int, seed: int = 0) -> np.ndarray:
    """``num_inducing`` k-means centres (points initialisation, fixed seed) of a subsample of the inputs."""
    sample = _subsample(np.asarray(x, dtype=float), seed)
    if num_inducing > sample.shape[0]:
        raise ValueError(f"num_inducing={num_inducing} exceeds the number of rows ({sample.shape[0]})")
    if num_inducing == sample.shape[0]:
        return sample.copy()
    with warnings.catch_warnings():
        # A cluster left empty (rows with few distinct values: one-hot columns, repeated rows) keeps its
        # starting point, one of the rows: a valid inducing input, so scipy's advice to re-run does not apply.
        warnings.filterwarnings("ignore", message="One of the clusters is empty", category=UserWarning)
        centres, _ = kmeans2(sample, num_inducing, minit="points", seed=np.random.default_rng(seed))
    return centres


def initial_kernel_and_inducing(
    x: np.ndarray,
    num_inducing: int,
    *,
    inducing=None,
    lengthscales=None,
    variance: float = 1.0,
    seed: int = 0,
):
    """Starting ``(lengthscales [D], variance, inducing [M, D])`` as float64 numpy values.

    Unspecified pieces come from the data: k-means inducing inputs and median-distance lengthscales.
    """
    x = np.asarray(x, dtype=float)
    z = kmeans_inducing(x, num_inducing, seed) if inducing is None else np.asarray(inducing, dtype=float)
    if lengthscales is None:
        lengthscales = median_lengthscale(x, seed)
    lengthscales = np.broadcast_to(np.asarray(lengthscales, dtype=float), (x.shape[1],)).copy()
    return lengthscales, float(variance), z
