"""pep — Expectation-Propagation-family sparse Gaussian processes, from a notebook to a Dask cluster.

One import root, one folder (``src/pep_gp/``), three layers:

* :mod:`pep_gp.core` (folder ``src/pep_gp/core/``) — the mathematics: pure JAX functions of (params, data);
* :mod:`pep_gp.pipeline` (``src/pep_gp/pipeline/``) — stores, the engine, the trainer and the estimators;
* :mod:`pep_gp.flows` (``src/pep_gp/flows/``) — the Prefect flows and the ``pep`` command line.

The estimators and the run API are re-exported here, and the public modules (``pep_gp.kernels``, …) are
attributes of the package, all imported lazily (PEP 562), so that ``import pep_gp`` and the ingest command
do not load JAX (≈ 180 MB of resident memory) until needed.

Example:
    >>> from pep_gp import SparseGPClassifier
    >>> SparseGPClassifier().get_params()["alpha"]
    0.5
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pep-gp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

_ESTIMATORS = ("SparseGPRegressor", "HeteroscedasticGPRegressor", "SparseGPClassifier", "OrdinalGPClassifier", "MultiClassGPClassifier",
               "DirectMultiClassGPClassifier", "TiedEPClassifier", "DeepGPRegressor", "DeepGPClassifier",
               "MultiClassDeepGPClassifier")
_EXPORTS = {
    **{name: "pep_gp.pipeline.estimators.models" for name in _ESTIMATORS},
    "CollapsedGPRegressor": "pep_gp.pipeline.estimators.collapsed",
    "MultiOutputGPRegressor": "pep_gp.pipeline.estimators.multi_output",
    "ExactGPClassifier": "pep_gp.pipeline.estimators.untied",
    "MultiClassEPClassifier": "pep_gp.pipeline.estimators.untied",
    "load": "pep_gp.pipeline.estimators.runs",
    "InputError": "pep_gp.pipeline.errors",
    "MODELS": "pep_gp.pipeline.models",
    "TrainConfig": "pep_gp.pipeline.runs.config",
    "train": "pep_gp.pipeline.training.trainer",
    "evaluate": "pep_gp.pipeline.runs.run",
    "Callback": "pep_gp.pipeline.training.callbacks",
    "StopTraining": "pep_gp.pipeline.training.callbacks",
    "MLflowLogger": "pep_gp.pipeline.training.tracking",
    "TensorBoardLogger": "pep_gp.pipeline.training.tracking",
}

_MODULES = ("core", "flows", "kernels", "means", "pipeline")

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    if name in _MODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'pep_gp' has no attribute {name!r}")


def __dir__():
    return [*__all__, *_MODULES]
