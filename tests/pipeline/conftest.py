"""Fixtures of the training tests: small real stores and one real 2-process LocalCluster."""

from __future__ import annotations

import pytest

from pep_gp.pipeline.engine import connect
from tests.trainstores import make_store


@pytest.fixture(scope="session")
def binary_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("stores") / "binary.zarr")


@pytest.fixture(scope="session")
def regression_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("stores") / "regression.zarr", task="regression")


@pytest.fixture(scope="session")
def cluster():
    """A LocalCluster of two spawned worker processes (threads_per_worker=1), shared by the session."""
    backend = connect("local:2")
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def three_class_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("stores") / "three-class.zarr", n_classes=3)
