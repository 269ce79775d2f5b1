"""Issue 62, item 9: ``pep ingest … --append --out STORE`` got the option parser's raw message (``--out`` read
as the store to grow, ``STORE`` an unexpected extra argument, in a usage box). Now it is one line that
says how ``--append`` is written, exit code 2, and nothing is written."""

from __future__ import annotations

from typer.testing import CliRunner

from pep_gp.flows.cli import app


def test_append_followed_by_an_option_is_one_line(tmp_path):
    (tmp_path / "t.csv").write_text("a,label\n1,x\n2,y\n3,x\n")
    result = CliRunner().invoke(app, ["ingest", "csv", "--input", str(tmp_path / "t.csv"), "--target", "label",
                                      "--append", "--out", str(tmp_path / "s.zarr")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr == ("pep ingest: error: --append: expected the store to grow, found the option '--out'; "
                             "write --append STORE (it takes no --out)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
