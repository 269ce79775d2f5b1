"""Shared test fixtures: every test runs JAX in float64 (scoped, see ``pep_gp.core.float64``)."""

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest

import pep_gp.core


@pytest.fixture(autouse=True)
def _float64():
    with pep_gp.core.float64():
        yield
