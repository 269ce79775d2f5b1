"""Published versions of a model directory (pep_gp.pipeline.runs.versions): the keep-live rule on real
files — a worse candidate is published but not made live, a better one (or one within the tolerance) is — and
a process killed by the kernel halfway through copying a version leaves the live version as it was."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs.versions import becomes_live, live_version, publish, published

DATA = {"store": "s.zarr", "checksum": "sha256:0"}


def checkpoint(root, step, payload=b"params", size=0):
    """A directory shaped as a run's checkpoint (``train/checkpoints/step-N``) holding ``payload`` (padded to
    ``size`` bytes), so that a version's copy can be told from another's."""
    path = root / "train" / "checkpoints" / f"step-{step:08d}"
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"step": step}))
    (path / "params").write_bytes(payload.ljust(size, b"\0"))
    return path


def live_payload(model_dir):
    (step,) = (live_version(model_dir) / "checkpoints").iterdir()
    return (step / "params").read_bytes().rstrip(b"\0")


def test_the_first_version_becomes_live_a_worse_one_does_not_and_a_better_one_does(tmp_path):
    first = publish(tmp_path, checkpoint(tmp_path, 4, b"one"), {"test_nll": 0.60, "step": 4}, None, 0.01, DATA)
    assert first["live"] and live_version(tmp_path).name == "1" and live_payload(tmp_path) == b"one"
    worse = publish(tmp_path, checkpoint(tmp_path, 8, b"two"), {"test_nll": 0.62}, {"test_nll": 0.60}, 0.01, DATA)
    assert not worse["live"] and worse["previous_live"] == 1
    assert live_version(tmp_path).name == "1" and live_payload(tmp_path) == b"one"
    within = publish(tmp_path, checkpoint(tmp_path, 12, b"three"), {"test_nll": 0.605}, {"test_nll": 0.60}, 0.01, DATA)
    assert within["live"] and live_version(tmp_path).name == "3" and live_payload(tmp_path) == b"three"
    better = publish(tmp_path, checkpoint(tmp_path, 16, b"four"), {"test_nll": 0.40}, {"test_nll": 0.605}, 0.01, DATA)
    assert better["live"] and live_version(tmp_path).name == "4" and live_payload(tmp_path) == b"four"
    records = published(tmp_path)
    assert [r["version"] for r in records] == [1, 2, 3, 4] and [r["live"] for r in records] == [True, False, True, True]
    assert records[1]["previous_live_metrics"] == {"test_nll": 0.60} and records[1]["checkpoint"] == "step-00000008"


def test_the_rule_compares_the_nll_with_the_tolerance_and_never_promotes_a_non_finite_one():
    assert becomes_live({"test_nll": 1.0}, None, 0.0)
    assert becomes_live({"test_nll": 0.51}, {"test_nll": 0.5}, 0.01)
    assert not becomes_live({"test_nll": 0.5101}, {"test_nll": 0.5}, 0.01)
    assert not becomes_live({"test_nll": float("nan")}, None, 0.01)
    with pytest.raises(InputError, match=r"tolerance: expected a finite number >= 0 .* found -0\.1"):
        becomes_live({"test_nll": 0.5}, None, -0.1)


def test_a_process_killed_halfway_through_a_publish_leaves_the_live_version_intact(tmp_path):
    """The publishing process may write at most 64 KiB per file (RLIMIT_FSIZE): copying the candidate's
    1 MiB parameter file gets it killed by the kernel (SIGXFSZ) with the version half copied. The live version
    and its files are as before; the next publish removes the leftover and takes the next number."""
    publish(tmp_path, checkpoint(tmp_path, 4, b"one"), {"test_nll": 0.6}, None, 0.01, DATA)
    candidate = checkpoint(tmp_path, 8, b"two", size=2**20)
    limit = 2**16

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    code = ("import signal, sys; from pathlib import Path; from pep_gp.pipeline.runs.versions import publish; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "  # Python ignores it; any other program dies of it
            "publish(Path(sys.argv[1]), Path(sys.argv[2]), {'test_nll': 0.1}, {'test_nll': 0.6}, 0.01, {})")
    killed = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(candidate)], preexec_fn=small_files,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr.decode()[-2000:]
    (partial,) = (tmp_path / "versions").glob(".2.partial")
    assert 0 < (partial / "checkpoints" / candidate.name / "params").stat().st_size <= limit  # killed mid-copy
    assert live_version(tmp_path).name == "1" and live_payload(tmp_path) == b"one"
    assert [r["version"] for r in published(tmp_path)] == [1]
    again = publish(tmp_path, candidate, {"test_nll": 0.1}, {"test_nll": 0.6}, 0.01, DATA)
    assert again["version"] == 2 and live_payload(tmp_path) == b"two"
    assert not list((tmp_path / "versions").glob(".*.partial"))
