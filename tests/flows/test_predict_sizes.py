"""Issue 62, item 6: sizes a user gives are checked before anything is allocated by them. ``pep predict
--samples 1000000000`` ended in a ``MemoryError`` traceback; now the draws of a chunk of rows are bounded by
:data:`~pep_gp.pipeline.runs.predict.SAMPLE_BYTES` and a larger request is refused in one line that says
how many draws per row this input allows."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs.predict import SAMPLE_BYTES, predict


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_billion_draws_per_row_are_refused_in_one_line(messy_classifier, tmp_path):
    result = run("predict", "--run-dir", messy_classifier.run_dir, "--input", messy_classifier.new_csv, "--sep", ";",
                 "--out", tmp_path / "p.csv", "--samples", 1_000_000_000)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    allowed = SAMPLE_BYTES // (16 * 65_536)  # a table is read 65,536 rows a chunk
    assert (f"--samples 1,000,000,000: the draws of a chunk of 65,536 rows would take "
            f"{16 * 65_536 * 1_000_000_000 / 2**30:,.0f} GiB, more than "
            f"the {SAMPLE_BYTES // 2**30} GiB pep predict allows; at most {allowed:,} draws per row") in result.stderr
    assert not (tmp_path / "p.csv").exists()


def test_the_bound_is_of_the_rows_a_store_chunk_holds(messy_classifier, tmp_path):
    """A store's chunks are its own (the messy store: 240 rows): more draws per row fit in the same budget,
    and one more than the bound is refused by the library call too."""
    allowed = SAMPLE_BYTES // (16 * 240)
    with pytest.raises(InputError, match=rf"at most {allowed:,} draws per row"):
        predict(messy_classifier.run_dir, messy_classifier.store, tmp_path / "p.csv", samples=allowed + 1)
    assert not (tmp_path / "p.csv").exists()
