"""One real Prefect (the test harness: a temporary API server and database) for the flow tests that ask for it,
all of them on one pytest-xdist worker under ``--dist loadgroup`` (the README's tier), so that one process
starts it."""

import os

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if "prefect_harness" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("prefect"))


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server per test process for the tests that run flows or read Prefect's records
    (``@pytest.mark.usefixtures("prefect_harness")``); the others run without a Prefect API, as ``pep`` does by
    default, and a process that runs none of them starts no server."""
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
