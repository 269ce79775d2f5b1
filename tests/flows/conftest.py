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
    from prefect.logging.configuration import setup_logging

    with prefect_test_harness(server_startup_timeout=300):
        # Prefect configures logging once per process with dictConfig, which closes every handler made before;
        # absl's (imported with jax) then closes its stream, pytest's capture file, unless that stream is
        # sys.stderr at the time, which it is not inside a CliRunner invocation (streams swapped): pytest then
        # dies with "lost sys.stderr". So Prefect's logging is configured here, outside any runner.
        setup_logging()
        yield
