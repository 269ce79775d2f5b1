"""Shared test fixtures: every test runs JAX in float64 (scoped, see ``pep_gp.core.float64``), and every
process of one test run (pytest-xdist's workers, the ``pep`` commands and Dask workers the tests start) shares
one persistent compilation cache in a temporary directory, so a program compiled by one is loaded by the
others (the same executable: bit-identical results, tests/pipeline/test_compilation.py). A run given
``$PEP_COMPILATION_CACHE`` (``.ci/run`` shares one across its stages) uses that instead."""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import numpy as np
import pytest
from filelock import FileLock

import pep_gp.core
from pep_gp.pipeline.engine.compilation import (COMPILATION_CACHE_ENV, release_compiled_programs_if_crowded,
                                                use_compilation_cache)
from tests import tiny
from tests.messy_runs import MessyRun, messy_run


def pytest_configure(config):
    """The run's compilation cache: made by the first process (the controller with pytest-xdist, whose
    workers inherit the variable) and removed by it at the end."""
    if not os.environ.get(COMPILATION_CACHE_ENV):
        os.environ[COMPILATION_CACHE_ENV] = config._pep_compilation_cache = tempfile.mkdtemp(prefix="pep-test-jax-")
    use_compilation_cache()


def pytest_collection_modifyitems(items):
    """The tests marked ``long`` first, the rest in their order: pytest-xdist's workers then take the short
    ones as they free up (``--dist worksteal``) and end together, not one waiting on a long test collected last."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_unconfigure(config):
    if getattr(config, "_pep_compilation_cache", None):
        shutil.rmtree(config._pep_compilation_cache, ignore_errors=True)


@pytest.fixture(autouse=True)
def _float64():
    with pep_gp.core.float64():
        yield
    release_compiled_programs_if_crowded()  # one process runs the whole suite: stay below vm.max_map_count


def shared_directory(tmp_path_factory, name: str) -> tuple[Path, FileLock]:
    """A directory of this test run that every pytest-xdist worker sees under one name, and the lock that makes
    one of them fill it while the others wait (without pytest-xdist: a directory of this process)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common directory
    return root / name, FileLock(root / f"{name}.lock")


def messy_run_once(tmp_path_factory, task: str) -> MessyRun:
    """:func:`~tests.messy_runs.messy_run` trained once per test run, by the first worker that asks: the tests
    only read it (those that write into a run copy it first)."""
    directory, lock = shared_directory(tmp_path_factory, f"messy-{task}")
    with lock:
        return messy_run(directory, task)


@pytest.fixture(scope="session")
def messy_classifier(tmp_path_factory):
    """A ``sparse-gp-classifier`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run_once(tmp_path_factory, "classification")


@pytest.fixture(scope="session")
def messy_regressor(tmp_path_factory):
    """A ``sparse-gp-regressor`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run_once(tmp_path_factory, "regression")


@pytest.fixture(scope="session")
def tiny_data() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The standard tiny data sets of :mod:`tests.tiny`, by task: ``"regression"``, ``"binary"``, ``"multiclass"``."""
    return tiny.data()
