"""pipeline — data stores, the distributed engine, the coordinator and the estimators."""

from pipeline.estimators import SparseGPClassifier, SparseGPRegressor

__all__ = ["SparseGPClassifier", "SparseGPRegressor"]
