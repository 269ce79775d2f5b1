"""What the ``pep`` commands share: options (``--prefect``, ``--cluster``'s TLS files, lists of names), how a
summary is printed, and how a failure is reported (one line on stderr; exit code 2 for bad input, 1 for an I/O
error or failed training)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..pipeline.cluster_address import CLUSTER_HELP, TLS_CONFIG, parse_cluster
from ..pipeline.errors import InputError, TrainingFailed

PrefectFlag = Annotated[bool, typer.Option(
    "--prefect", help="Run as a Prefect flow (tasks with retries, artifacts); the default when PREFECT_API_URL "
                      "or a Prefect profile's API is set. Without it no Prefect server is started.")]
ClusterOption = Annotated[str, typer.Option(help=CLUSTER_HELP + ".")]
RunDirOption = Annotated[Path, typer.Option(help="A run directory written by `pep train`.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON summary object.")]
QuietFlag = Annotated[bool, typer.Option(help="No progress display or summary.")]
TlsCaFile = Annotated[Path | None, typer.Option(help="CA certificate of a tls:// cluster (default: Dask's "
                                                     "distributed.comm.tls.ca-file).")]
TlsCert = Annotated[Path | None, typer.Option(help="Client certificate for a tls:// cluster (default: "
                                                   "Dask's distributed.comm.tls.client.cert).")]
TlsKey = Annotated[Path | None, typer.Option(help="Its private key (default: Dask's "
                                                  "distributed.comm.tls.client.key).")]


def print_summary(text: str, highlight: bool = True) -> None:
    """A command's summary on stdout as plain text (no markup; Rich's highlighting of numbers and paths on a
    terminal unless ``highlight`` is False), its lines never wrapped: where stdout is no terminal (a pipe, a log,
    a notebook's ``!pep``) Rich takes it for 80 columns and broke a store's checksum onto a line of its own."""
    Console().print(text, markup=False, highlight=highlight, soft_wrap=True)


@contextmanager
def user_errors(command: str) -> Iterator[None]:
    """Turn bad input (exit code 2), and I/O errors and failed training (exit code 1), into one line on
    stderr."""
    try:
        yield
    except (InputError, OSError, TrainingFailed) as error:
        typer.echo(f"{command}: error: {error}", err=True)
        raise typer.Exit(2 if isinstance(error, InputError) else 1) from None


def names(values: Sequence[str] | None) -> tuple[str, ...]:
    """Column names given as repeated options and/or comma-separated lists (``--drop a,b --drop c``)."""
    return tuple(name.strip() for value in values or () for name in value.split(",") if name.strip())


class _NotACancelledClose(logging.Filter):
    """Drops the traceback Dask's client logs when a coroutine of its own is cancelled (``asyncio.CancelledError``):
    after a lost scheduler its reconnection gives up and closes the client while pep, which gave up on the step
    too, closes it, and the one cancels the other; the run's own one-line error says what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncio  # loaded with Dask's client, whose records these are

        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


NOT_A_CANCELLED_CLOSE = _NotACancelledClose()


def quiet_cluster_logs() -> None:
    """Only errors from Dask's client logger (a cluster's start and stop chatter is not the user's concern), and
    not a close that cancelled another (:class:`_NotACancelledClose`)."""
    logging.getLogger("distributed").setLevel(logging.ERROR)
    logging.getLogger("distributed.client").addFilter(NOT_A_CANCELLED_CLOSE)  # added once, however often called


def use_cluster(cluster: str, tls_ca_file: Path | None, tls_cert: Path | None, tls_key: Path | None) -> None:
    """Check ``--cluster`` and make the ``--tls-*`` files Dask's client TLS configuration of this
    process (over ``DASK_DISTRIBUTED__COMM__TLS__*`` and Dask's config files), so that the flow's
    :func:`~pep_gp.pipeline.engine.connect` uses them; refuse a tls:// cluster without them."""
    quiet_cluster_logs()
    parse_cluster(cluster)
    given = {TLS_CONFIG[name]: str(path) for name, path in (("ca", tls_ca_file), ("cert", tls_cert),
                                                             ("key", tls_key)) if path is not None}
    if given and not cluster.startswith("tls://"):
        raise InputError(f"--tls-ca-file/--tls-cert/--tls-key: only for a tls:// --cluster, found {cluster!r}")
    import dask  # Dask and the engine (which loads JAX) only once the options are checked

    from ..pipeline.engine.clusters import client_security

    dask.config.set(given)
    client_security(cluster)
