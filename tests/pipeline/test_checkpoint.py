"""Checkpoints: round trip, newest complete wins, damaged/incomplete ones skipped with a warning, pruning."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pep_gp.pipeline.training import checkpoint
from pep_gp.pipeline.training.checkpoint import CheckpointWarning
from tests.trainstores import leaves_equal

TREES = {"params": {"a": np.arange(6.0).reshape(2, 3), "b": (np.float64(2.5), np.int32(7))},
         "key": np.array([0, 42], np.uint32)}


def shifted(step):
    return {"params": {"a": TREES["params"]["a"] + step, "b": TREES["params"]["b"]}, "key": TREES["key"]}


def restore(run_dir):
    return checkpoint.restore(run_dir, lambda manifest: TREES)


def test_round_trip_with_metadata(tmp_path):
    path = checkpoint.save(tmp_path, 12, TREES, {"note": "x", "history": [{"e": 0.1}]}, keep=3)
    assert path == tmp_path / "checkpoints" / "step-00000012" and (path / "manifest.json").exists()
    restored = restore(tmp_path)
    assert restored.step == 12 and restored.meta["note"] == "x" and restored.meta["history"] == [{"e": 0.1}]
    assert leaves_equal(restored.trees, TREES)
    assert restored.trees["params"]["b"][1].dtype == np.int32


def test_no_checkpoint(tmp_path):
    assert restore(tmp_path) is None and not checkpoint.has_checkpoints(tmp_path)


def test_prunes_to_the_newest_k(tmp_path):
    for step in (2, 4, 6, 8):
        checkpoint.save(tmp_path, step, shifted(step), {}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000006", "step-00000008"]


def test_incomplete_newest_is_skipped_with_a_warning(tmp_path):
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    interrupted = checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    (interrupted / "manifest.json").unlink()  # as if killed before the manifest was renamed in
    with pytest.warns(CheckpointWarning, match="step-00000004 skipped: it has no manifest"):
        restored = restore(tmp_path)
    assert restored.step == 2 and leaves_equal(restored.trees, shifted(2))


def test_truncated_newest_falls_back_to_the_previous(tmp_path):
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    newest = checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    chunk = next(p for p in (newest / "params" / "0000").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(chunk.read_bytes()[:-5])
    with pytest.warns(CheckpointWarning, match="step-00000004 skipped: it is damaged"):
        restored = restore(tmp_path)
    assert restored.step == 2 and leaves_equal(restored.trees, shifted(2))


def test_damaged_manifest_is_skipped(tmp_path):
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    newest = checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    (newest / "manifest.json").write_text('{"format": 1, "st')
    with pytest.warns(CheckpointWarning, match="its manifest is damaged"):
        assert restore(tmp_path).step == 2


def test_a_rewrite_of_an_interrupted_step_replaces_it(tmp_path):
    path = checkpoint.save(tmp_path, 4, shifted(1), {}, keep=3)
    (path / "manifest.json").unlink()
    (path / "stray").write_text("left over")
    checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    assert not (path / "stray").exists() and leaves_equal(restore(tmp_path).trees, shifted(4))
    assert json.loads((path / "manifest.json").read_text())["step"] == 4


def test_template_mismatch_is_reported_as_damage_of_that_checkpoint(tmp_path):
    checkpoint.save(tmp_path, 2, TREES, {}, keep=3)
    other = {"params": {"a": np.zeros((3, 3)), "b": TREES["params"]["b"]}, "key": TREES["key"]}
    with pytest.warns(CheckpointWarning, match=r"has shape \[2, 3\], the model needs"):
        assert checkpoint.restore(tmp_path, lambda manifest: other) is None
