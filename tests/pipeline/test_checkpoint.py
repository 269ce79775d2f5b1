"""Checkpoints: round trip, newest complete wins, damaged/incomplete ones skipped with a warning, only
damaged ones refused, pruning that counts intact checkpoints only, metadata never trusted before it is checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs import checkpoint
from pep_gp.pipeline.runs.checkpoint import CheckpointWarning
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
    with (pytest.warns(CheckpointWarning, match=r"has shape \[2, 3\], the model needs"),
          pytest.raises(InputError, match=r"no intact checkpoint to continue from \(step-00000002: it is damaged")):
        checkpoint.restore(tmp_path, lambda manifest: other)


def damage(path):
    """Flip the last byte of one chunk file of the checkpoint at ``path``."""
    chunk = next(p for p in (path / "params" / "0000").rglob("*") if p.is_file() and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))


def test_only_damaged_checkpoints_are_refused_not_restarted(tmp_path):
    """Audit (issue 27): --resume with every checkpoint damaged started again from step 0 and exited 0."""
    paths = [checkpoint.save(tmp_path, step, shifted(step), {}, keep=3) for step in (2, 4)]
    for path in paths:
        damage(path)
    with (pytest.warns(CheckpointWarning),
          pytest.raises(InputError, match=r"no intact checkpoint to continue from \(step-00000004: it is damaged "
                                          r"\(.*\); step-00000002: it is damaged .*\); move .*checkpoints aside")):
        restore(tmp_path)
    only_interrupted = tmp_path / "interrupted"
    (checkpoint.save(only_interrupted, 2, shifted(2), {}, keep=3) / "manifest.json").unlink()
    with pytest.warns(CheckpointWarning, match="no manifest"):
        assert restore(only_interrupted) is None  # an interrupted first write is no checkpoint: start afresh


def test_prune_counts_intact_checkpoints_only(tmp_path):
    """Audit (issue 27): damaged checkpoints counted as complete, so each new one was pruned at once."""
    for path in [checkpoint.save(tmp_path, step, shifted(step), {}, keep=3) for step in (20, 30, 40)]:
        damage(path)
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    assert (tmp_path / "checkpoints" / "step-00000002" / "manifest.json").exists()
    with pytest.warns(CheckpointWarning):
        assert restore(tmp_path).step == 2
    for step in (4, 6):  # a damaged checkpoint older than an intact one is removed; intact ones are kept
        checkpoint.save(tmp_path, step, shifted(step), {}, keep=2)
    damage(tmp_path / "checkpoints" / "step-00000006")
    checkpoint.save(tmp_path, 8, shifted(8), {}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000004", "step-00000008", "step-00000020", "step-00000030", "step-00000040"]


def test_array_metadata_is_checked_before_anything_is_read(tmp_path):
    """Audit (issue 27): a leaf's zarr.json claiming shape (3, 5, 4e9) allocated 447 GiB; now the checkpoint
    is damaged (its Zarr metadata disagrees with its manifest) and nothing is read."""
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    newest = checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    meta = newest / "params" / "0000" / "zarr.json"
    array = json.loads(meta.read_text())
    array["shape"] = [3, 5, 4_000_000_000]
    array["chunk_grid"]["configuration"]["chunk_shape"] = [3, 5, 4_000_000_000]
    meta.write_text(json.dumps(array))
    with pytest.warns(CheckpointWarning, match=r"array 'params/0000' has shape \[3, 5, 4000000000\], dtype <f8; its "
                                                r"manifest says shape \[2, 3\]"):
        assert restore(tmp_path).step == 2


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("step"), r"manifest field 'step': Field required"),
    (lambda m: m.update(step="four"), r"manifest field 'step': Input should be a valid integer"),
    (lambda m: m.update(step=6), r"manifest field 'step': 6, but the checkpoint is step-00000004"),
    (lambda m: m["leaves"]["params"][0].update(shape=[2] * 40), r"manifest field 'leaves.params.0.shape'"),
])
def test_manifest_fields_are_validated(tmp_path, edit, message):
    checkpoint.save(tmp_path, 2, shifted(2), {}, keep=3)
    newest = checkpoint.save(tmp_path, 4, shifted(4), {}, keep=3)
    manifest = json.loads((newest / "manifest.json").read_text())
    edit(manifest)
    (newest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(CheckpointWarning, match=message):
        assert restore(tmp_path).step == 2


def test_manifests_are_strict_json(tmp_path):
    path = checkpoint.save(tmp_path, 2, TREES, {"history": [{"energy": float("nan"), "nll": float("inf")}]}, keep=3)
    text = (path / "manifest.json").read_text()
    manifest = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in a manifest"))
    assert manifest["history"] == [{"energy": None, "nll": None}]
