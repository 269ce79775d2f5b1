"""Shared test fixtures: every test runs JAX in float64 (scoped, see ``pepcore.float64``)."""

import os

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest

import pepcore


@pytest.fixture(autouse=True)
def _float64():
    with pepcore.float64():
        yield
