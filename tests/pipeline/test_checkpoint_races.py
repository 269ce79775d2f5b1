"""Issue 62, item 4: a reader of a run while ``pep train`` checkpoints into it. ``pep_gp.load(run)`` failed 3
times in 143 when the trainer pruned the checkpoint the reader had chosen: two raw ``FileNotFoundError`` s
and one message advising to move every checkpoint aside, on a healthy run. Now a checkpoint removed while
it is read sends the reader back to the run's new listing, whose newest intact checkpoint it reads.

The prune is a real one (:func:`checkpoint.save` with ``keep``, removing directories) made at the moment
the reader has chosen its checkpoint, and once by a writer process saving as fast as it can."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from pep_gp.pipeline.runs import checkpoint
from tests.trainstores import leaves_equal

TREES = {"params": {"a": np.arange(6.0).reshape(2, 3), "b": np.float64(2.5)}}


def shifted(step):
    return {"params": {"a": TREES["params"]["a"] + step, "b": TREES["params"]["b"]}}


def write(run_dir, *steps, keep=2):
    for step in steps:
        checkpoint.save(run_dir, step, shifted(step), {}, keep=keep)


def test_a_checkpoint_pruned_after_its_manifest_was_read(tmp_path):
    """The writer saves steps 3 and 4 (keep 2: 1 and 2 removed) after the reader read step 2's manifest,
    before its arrays: the reader reads step 4, warning of nothing."""
    write(tmp_path, 1, 2)
    pruned = []

    def templates(manifest):
        if not pruned:
            pruned.append(manifest["step"])
            write(tmp_path, 3, 4)
        return shifted(0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = checkpoint.restore(tmp_path, templates)
    assert pruned == [2] and not (tmp_path / "checkpoints" / "step-00000002").exists()
    assert restored.step == 4 and leaves_equal(restored.trees, shifted(4))


def test_every_listed_checkpoint_pruned_before_its_manifest_was_read(tmp_path, monkeypatch):
    """The writer saves steps 3 and 4 between the reader's listing (1, 2) and its reading of step 2's
    manifest: nothing the reader listed is left; the run is not taken for one without checkpoints."""
    write(tmp_path, 1, 2)
    read_manifest, pruned = checkpoint.read_manifest, []

    def after_a_prune(path):
        if not pruned:
            pruned.append(path.name)
            write(tmp_path, 3, 4)
        return read_manifest(path)

    monkeypatch.setattr(checkpoint, "read_manifest", after_a_prune)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = checkpoint.restore(tmp_path, lambda manifest: shifted(0))
    assert pruned == ["step-00000002"] and restored.step == 4 and leaves_equal(restored.trees, shifted(4))


WRITER = """
import sys
import numpy as np
from pep_gp.pipeline.runs import checkpoint
trees = {"params": {"a": np.arange(6.0).reshape(2, 3), "b": np.float64(2.5)}}
for step in range(2, 100_000):
    checkpoint.save(sys.argv[1], step, {"params": {"a": trees["params"]["a"] + step, "b": trees["params"]["b"]}},
                    {}, keep=1)
"""


@pytest.mark.exhaustive
@pytest.mark.slow
def test_a_reader_beside_a_writer_process_never_fails(tmp_path):
    """A writer process saving with ``keep=1`` (each save removes the previous checkpoint) and 300 restores
    beside it: each returns an intact checkpoint of a step the writer wrote."""
    write(tmp_path, 1, keep=1)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    try:
        began = time.monotonic()
        while not [path for path in (tmp_path / "checkpoints").iterdir() if path.name != "step-00000001"]:
            assert time.monotonic() - began < 120 and writer.poll() is None, "the writer did not start"
            time.sleep(0.05)
        steps = []
        for _ in range(300):
            restored = checkpoint.restore(tmp_path, lambda manifest: shifted(0))
            assert leaves_equal(restored.trees, shifted(restored.step))
            steps.append(restored.step)
    finally:
        writer.kill()
        writer.wait()
    assert steps == sorted(steps) and steps[-1] > steps[0]
