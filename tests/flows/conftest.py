"""One real Prefect (the test harness: a temporary API server and database) for all flow tests."""

import os

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    """Run every test under ``tests/flows`` against one shared Prefect test server."""
    from prefect.testing.utilities import prefect_test_harness

    # 300 s, not 120: in one run at load 13 on the 2-core machine every flow test errored in setup (the
    # server's start-up limit the likely cause); a generous limit costs nothing when the start is quick.
    with prefect_test_harness(server_startup_timeout=300):
        yield
