"""The ``pep-refresh`` flow's bookkeeping, without a server (the two scheduled runs on a real server and worker:
tests/infra/test_scheduled_refresh.py): which files are new, what a run stopped during its ingest counts as
ingested, and the checks a run makes before anything is read."""

from __future__ import annotations

import pytest

from pep_gp.flows.refresh import new_files, read_ledger, refresh_run, write_ledger
from pep_gp.pipeline.errors import InputError


def test_new_files_are_the_names_not_ingested_yet_dot_names_skipped(tmp_path):
    for name in ("b.csv", "a.csv", ".c.csv.partial"):
        (tmp_path / name).write_text("x\n")
    assert [p.name for p in new_files(tmp_path, [])] == ["a.csv", "b.csv"]
    assert [p.name for p in new_files(tmp_path, ["a.csv"])] == ["b.csv"]
    with pytest.raises(InputError, match=r"incoming .*/missing: no such directory"):
        new_files(tmp_path / "missing", [])


def test_files_pending_when_a_run_stopped_count_as_ingested_only_if_the_store_changed(tmp_path):
    write_ledger(tmp_path, ["a.csv"])
    assert read_ledger(tmp_path, "sha256:1") == ["a.csv"]
    write_ledger(tmp_path, ["a.csv"], ["b.csv"], "sha256:1")  # then the run stopped
    assert read_ledger(tmp_path, "sha256:1") == ["a.csv"]  # the store is as it was: b.csv is read again
    assert read_ledger(tmp_path, "sha256:2") == ["a.csv", "b.csv"]  # the append was swapped in
    write_ledger(tmp_path, [], ["a.csv"], None)  # the first ingest, before there was a store
    assert read_ledger(tmp_path, None) == [] and read_ledger(tmp_path, "sha256:1") == ["a.csv"]


def test_a_run_without_new_files_or_a_store_does_nothing_and_bad_options_fail_first(tmp_path):
    (tmp_path / "in").mkdir()
    args = dict(source="csv", incoming=str(tmp_path / "in"), store=str(tmp_path / "s.zarr"),
                model="sparse-gp-classifier", model_dir=str(tmp_path / "m"))
    assert refresh_run(**args) == {"new_files": [], "ingest": None, "train": None, "evaluate": None,
                                   "live_evaluate": None, "version": None, "predict": None, "live": None}
    with pytest.raises(InputError, match=r"tolerance: expected a finite number >= 0 .* found nan"):
        refresh_run(**args, tolerance=float("nan"))
    with pytest.raises(InputError, match="predict_input/predict_out: give both"):
        refresh_run(**args, predict_input=str(tmp_path / "x.csv"))
    with pytest.raises(InputError, match=r"--out .*/nowhere/p\.csv: directory .*/nowhere does not exist"):
        refresh_run(**args, predict_input=str(tmp_path / "x.csv"), predict_out=str(tmp_path / "nowhere" / "p.csv"))
