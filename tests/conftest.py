"""Shared test fixtures: every test runs JAX in float64 (scoped, see ``pep_gp.core.float64``)."""

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest

import pep_gp.core
from pep_gp.pipeline.engine.compilation import release_compiled_programs_if_crowded
from tests.messy_runs import messy_run


@pytest.fixture(autouse=True)
def _float64():
    with pep_gp.core.float64():
        yield
    release_compiled_programs_if_crowded()  # one process runs the whole suite: stay below vm.max_map_count


@pytest.fixture(scope="session")
def messy_classifier(tmp_path_factory):
    """A ``sparse-gp-classifier`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run(tmp_path_factory.mktemp("messy-classifier"), "classification")


@pytest.fixture(scope="session")
def messy_regressor(tmp_path_factory):
    """A ``sparse-gp-regressor`` run trained by ``pep ingest`` and ``pep train`` on a messy CSV."""
    return messy_run(tmp_path_factory.mktemp("messy-regressor"), "regression")
