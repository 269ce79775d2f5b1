"""``pep ingest`` end to end: JSON output on the bundled flights, quiet mode, and one-line errors."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.data.stores import open_store
from tests import datafiles


def run(*args):
    """Run ``pep ingest ARGS`` in-process."""
    return CliRunner().invoke(app, ["ingest", *map(str, args)])


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize(("target", "n_classes"), [(None, 3), ("delayed", 2), ("delay", None)])
def test_airline_bundled_flights_json(tmp_path, target, n_classes):
    out = tmp_path / "A.zarr"
    result = run("airline", "--out", out, "--json", *(["--target", target] if target else []))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows_train"] + summary["rows_test"] == 273_853 and summary["rows_test"] == 10_000
    assert summary["n_features"] == 8 and summary["n_classes"] == n_classes
    assert summary["rows_dropped"]["plane has no year of manufacture"] == 5164
    assert summary["seconds"] < 30 and summary["store"] == str(out)
    if n_classes:
        assert len(summary["class_counts"]["train"]) == n_classes
    else:
        assert summary["class_counts"] is None
    assert open_store(out).n_classes == n_classes


@pytest.mark.heavy
def test_synthetic_airline_rows_are_labelled_synthetic_in_the_store_and_the_summary(tmp_path):
    out = tmp_path / "S.zarr"
    result = run("airline", "--synthetic-rows", 25_000, "--target", "delayed", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows_train"] + summary["rows_test"] == 25_000 and summary["rows_dropped_total"] == 0
    assert summary["source"].startswith("SYNTHETIC airline: 25,000 ") and summary["n_classes"] == 2
    attrs = open_store(out).attrs
    assert attrs["source"]["name"] == "airline-synthetic" and "SYNTHETIC" in attrs["source"]["description"]
    refused = run("sklearn:wine", "--synthetic-rows", 10, "--out", tmp_path / "W.zarr")
    assert refused.exit_code == 2 and "--synthetic-rows: only source 'airline'" in refused.stderr


def test_quiet_and_overwrite(tmp_path):
    datafiles.write_table(tmp_path / "t.csv")
    args = ("csv", "--input", tmp_path / "t.csv", "--target", "label", "--out", tmp_path / "s.zarr",
            "--quiet", "--chunk-rows", "50")
    assert run(*args).stdout == ""
    refused = run(*args)
    assert refused.exit_code == 2 and "already exists; pass --overwrite" in refused.stderr
    assert run(*args, "--overwrite", "--seed", "3").exit_code == 0
    assert open_store(tmp_path / "s.zarr").attrs["split_seed"] == 3


@pytest.mark.parametrize(("args", "message"), [
    (("csv", "--input", "{tmp}/missing.csv", "--target", "y"), "missing.csv: no such file"),
    (("csv", "--input", "{tmp}/t.csv", "--target", "y"), "t.csv: no column 'y' (the --target column)"),
    (("csv", "--input", "{tmp}/t.csv", "--target", "label", "--test-size", "0"),
     "--test-size: expected a row count ≥ 1 or a fraction in (0, 1), found '0'"),
    (("mnist", "--input", "{tmp}/t.csv"), "t.csv: expected a directory holding the MNIST IDX files"),
    (("airline", "--input", "{tmp}/t.csv"), "t.csv: not an airline file"),
])
def test_errors_are_one_line_on_stderr(tmp_path, args, message):
    datafiles.write_table(tmp_path / "t.csv")
    result = run(*(a.format(tmp=tmp_path) for a in args), "--out", tmp_path / "s.zarr", "--json")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "Traceback" not in result.stderr
    assert datafiles.listing(tmp_path) == {"t.csv"}


def test_the_ingest_summary_is_plain_text(tmp_path):
    """Aligned lines, no Markdown table (issue 42, item 7; the Prefect artifact keeps the table)."""
    datafiles.write_table(tmp_path / "t.csv", n_rows=50)
    result = run("csv", "--input", tmp_path / "t.csv", "--target", "label", "--out", tmp_path / "s.zarr")
    assert result.exit_code == 0, result.output
    assert "|" not in result.output
    assert any(line.split() == ["rows", "(train", "/", "test)", "40", "/", "10"] for line in result.output.splitlines())
    # One line per field, however narrow the terminal (80 columns when it is none): the checksum's 71 characters
    # were wrapped onto a line of their own.
    assert any(re.fullmatch(r" *checksum  sha256:[0-9a-f]{64}", line) for line in result.output.splitlines())


def test_rows_dropped_are_counted_in_the_summary_line_and_a_large_share_is_a_warning(tmp_path):
    """Issue 62, item 9a: ``--na drop`` (the default) left out 10 % of a real table, said only in the table below
    the summary line; now the summary line counts them, and 5 % or more is a warning on stderr, even ``--quiet``."""
    for name, every in (("ten.csv", 10), ("one.csv", 100)):  # a missing b on every 10th row, or on one row
        (tmp_path / name).write_text("a,b,label\n" + "".join(f"{i},{'' if i % every == 3 else i % 7},{i % 2}\n"
                                                                 for i in range(100)))
    result = run("csv", "--input", tmp_path / "ten.csv", "--target", "label", "--out", tmp_path / "ten.zarr")
    assert result.exit_code == 0, result.output
    dropped = "10 of 100 rows read (10.0%) dropped: 10 for missing value in column 'b'"
    assert re.fullmatch(rf"ingested 72 train and 18 test rows into \S*ten.zarr in [0-9.]+ s; {re.escape(dropped)}",
                        result.stdout.splitlines()[0]), result.stdout
    assert result.stderr == (f"pep ingest: warning: {dropped}; --na mean keeps them (a missing feature gets its "
                             "column's mean), --na fail stops at the first\n")
    quiet = run("csv", "--input", tmp_path / "ten.csv", "--target", "label", "--out", tmp_path / "q.zarr", "--quiet")
    assert quiet.stdout == "" and quiet.stderr == result.stderr
    few = run("csv", "--input", tmp_path / "one.csv", "--target", "label", "--out", tmp_path / "one.zarr")
    assert few.exit_code == 0 and few.stderr == ""
    assert few.stdout.splitlines()[0].endswith("; 1 of 100 rows read (1.0%) dropped: 1 for missing value in column 'b'")
