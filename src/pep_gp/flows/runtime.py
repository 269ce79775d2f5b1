"""Whether a command runs its flow under Prefect, and the Prefect objects of a flow module, built on demand.

Every flow of pep is a plain function (``ingest_run``, ``train_run``, …); its Prefect flow
(``ingest_flow``, …) wraps that same function and is built the first time it is asked for, so that a
command importing the module does not import Prefect (about 2 s) or start its temporary API server
(10–20 s). A command runs under Prefect only when the user asks for it (``--prefect``) or has a
Prefect API configured (``PREFECT_API_URL`` in the environment or in the active Prefect profile);
otherwise it calls the plain function, which computes the same result and writes the same files,
without Prefect's task retries and artifacts. Inside a Prefect flow run, the plain function uses tasks
and publishes artifacts (:func:`in_prefect_run`).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import tomllib
from collections.abc import Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

TELEMETRY_OFF = {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
"""Prefect's telemetry tries to reach the internet; off unless the user set these."""

PREFECT_ENV = {**TELEMETRY_OFF, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}


def prefect_api_configured(environ: dict[str, str] | None = None) -> bool:
    """Whether a Prefect API is configured: ``PREFECT_API_URL`` set in the environment, or in the
    active profile of ``$PREFECT_PROFILES_PATH`` (default ``$PREFECT_HOME/profiles.toml``,
    ``~/.prefect/profiles.toml``), read without importing Prefect."""
    environ = os.environ if environ is None else environ
    if environ.get("PREFECT_API_URL"):
        return True
    home = Path(environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    path = Path(environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    try:
        profiles = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    active = environ.get("PREFECT_PROFILE") or profiles.get("active", "ephemeral")
    settings = profiles.get("profiles", {}).get(active, {})
    return isinstance(settings, dict) and bool(settings.get("PREFECT_API_URL"))


def prefect_requested(flag: bool) -> bool:
    """Run under Prefect: ``--prefect`` given, or a Prefect API configured."""
    return flag or prefect_api_configured()


def secure_temporary_server(environ: MutableMapping[str, str] | None = None) -> None:
    """Without a configured Prefect API, Prefect starts a temporary API server on 127.0.0.1 for this
    process; by default any local process (a web page in a browser included: CORS ``*``) could use it
    to read and change this run. Give it a random auth string, sent by this process's client (and
    inherited by the server it starts), and admit cross-origin requests from loopback only (the
    temporary server serves no UI, so no page needs more). Unless the user set these; nothing is
    changed where an API is configured (its own auth belongs to the user), nor once Prefect is imported
    (its client has read its settings and would not send an auth string its server then required: in a
    test harness, or a program that runs pep's flows itself)."""
    environ = os.environ if environ is None else environ
    if prefect_api_configured(environ) or (environ is os.environ and "prefect" in sys.modules):
        return
    auth = environ.setdefault("PREFECT_SERVER_API_AUTH_STRING", f"pep:{secrets.token_hex(16)}")
    environ.setdefault("PREFECT_API_AUTH_STRING", auth)
    environ.setdefault("PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS", "http://127.0.0.1,http://localhost")


def prefect_quietly() -> None:
    """Telemetry off, a patient temporary server with an auth string (unless the user set these), and
    Prefect's console logs muted, so the terminal shows only progress, the summary or the error line."""
    for variable, value in PREFECT_ENV.items():
        os.environ.setdefault(variable, value)
    secure_temporary_server()
    import prefect.main  # noqa: F401  (sets up Prefect's logging, whose console handlers are muted next)
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *map(logging.getLogger, list(logging.root.manager.loggerDict))]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, PrefectConsoleHandler):
                handler.setLevel(logging.CRITICAL + 1)


def in_prefect_run() -> bool:
    """Whether this code runs inside a Prefect flow run (never without Prefect imported)."""
    context = sys.modules.get("prefect.context")
    return context is not None and context.FlowRunContext.get() is not None


def task_retried() -> bool:
    """Whether the running Prefect task is a retry (False outside a task)."""
    runtime = sys.modules.get("prefect.runtime.task_run")
    return runtime is not None and runtime.run_count > 1


def lazy_prefect(module: str, names: Iterable[str], build: Callable[[], dict[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving the module's Prefect objects (flows, tasks) named ``names``,
    built by ``build()`` on the first access to any of them (Prefect's deployments load a flow as an
    attribute of its module, which then imports Prefect)."""
    names, built = frozenset(names), {}

    def get(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if not built:
            built.update(build())
        return built[name]

    return get


def prefect_flow(fn: Callable, name: str) -> Any:
    """The Prefect flow ``name`` over the plain function ``fn`` (its ``.fn``)."""
    from prefect import flow

    return flow(name=name)(fn)


def prefect_task(fn: Callable, name: str, retry_condition: Callable | None = None) -> Any:
    """The Prefect task ``name`` over ``fn``, never cached; retried twice (after 2 s, then 10 s) when
    ``retry_condition`` says an error is transient, not retried without one."""
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    retries = {} if retry_condition is None else {"retries": 2, "retry_delay_seconds": [2, 10],
                                                  "retry_condition_fn": retry_condition}
    return task(fn, name=name, cache_policy=NO_CACHE, **retries)
