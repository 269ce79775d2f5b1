"""pipeline — data stores, the distributed engine, the coordinator and the estimators.

The estimators are imported lazily (PEP 562), so that ``import pipeline.data.stores`` and the ingest command
do not load JAX (≈ 180 MB of resident memory) when they do not need it.
"""

from importlib import import_module

_EXPORTS = {
    "DeepGPClassifier": "pipeline.estimators.deep_gp",
    "DeepGPRegressor": "pipeline.estimators.deep_gp",
    "MultiClassGPClassifier": "pipeline.estimators.multiclass",
    "SparseGPClassifier": "pipeline.estimators.sparse_gp",
    "SparseGPRegressor": "pipeline.estimators.sparse_gp",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
