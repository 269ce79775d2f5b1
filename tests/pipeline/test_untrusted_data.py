"""Issue 27's audit cases at the library level: nothing read from a store or a run directory is used before
it is checked, a store stays bound to its checksum for a whole run, a run directory has one writer, and
staging directories neither leak nor swap non-atomically. (The command-line exits of the same cases are in
``tests/flows/test_untrusted_cli.py``.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import zarr

from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.staging import remove_abandoned
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.runs.checkpoint import CheckpointWarning
from pep_gp.pipeline.runs.run import evaluate, load_run
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from tests.trainstores import (FAST, chunk_files, config_for, held_by_another_process, make_store,
                               rewrite_consistently)

SHORT = FAST.model_copy(update={"epochs": 1, "checkpoint_every": 100})  # 5 steps, one checkpoint


def test_a_deleted_chunk_is_not_read_as_zeros(tmp_path):
    """Audit: a deleted chunk file read as zeros and `pep train` exited 0 with test NLL = log 3."""
    store = make_store(tmp_path / "s.zarr")
    chunk_files(tmp_path / "s.zarr", "train/X")[2].unlink()
    with pytest.raises(InputError, match=r"s.zarr: train chunk 2 \(rows 128..191\) does not match its digest: "
                                         r"the store was modified after ingest"):
        train(TrainJob("sparse-gp-classifier", open_store(store.path), SHORT, None))
    with pytest.raises(InputError, match="does not match its digest"):
        open_store(store.path).verify()


def test_a_rewritten_chunk_fails_on_the_workers_too(tmp_path, cluster):
    """A chunk replaced by another valid chunk (same codec, other rows), read on two worker processes."""
    store = make_store(tmp_path / "s.zarr")
    first, second = chunk_files(tmp_path / "s.zarr", "train/X")[:2]
    first.write_bytes(second.read_bytes())
    with pytest.raises(InputError, match=r"train chunk 0 \(rows 0..63\) does not match its digest"):
        train(TrainJob("sparse-gp-classifier", open_store(store.path), SHORT, None), cluster)


@pytest.mark.parametrize("label", [7, -3])
def test_labels_outside_the_classes_are_refused_as_they_are_read(tmp_path, label):
    """Audit: labels 7 or −3 in a 3-class store trained. Here the store is crafted with consistent digests
    and checksum, so only the label check can catch them."""
    store = make_store(tmp_path / "s.zarr", n_classes=3)

    def edit(X, y):
        y = y.copy()
        y[5] = label
        return X, y

    rewrite_consistently(tmp_path / "s.zarr", "train", 1, edit)
    crafted = open_store(store.path)
    with pytest.raises(InputError, match=rf"s.zarr: train: row 69: expected a class label in 0..2, found {label}"):
        train(TrainJob("multiclass-sep", crafted, config_for("multiclass-sep", SHORT), None))


def test_an_overwrite_during_a_run_does_not_switch_its_data(tmp_path, monkeypatch):
    """Audit: `pep ingest --overwrite` during a run switched it to the new rows while its checkpoints kept
    the old checksum. With the block cache off every step reads its chunks again, and the run fails at
    the first one that is not the data it started with."""
    monkeypatch.setenv("PEP_BLOCK_CACHE_MB", "0")
    store = make_store(tmp_path / "s.zarr")
    trainer = Trainer(TrainJob("sparse-gp-classifier", store, FAST, tmp_path / "run"), InProcess())
    trainer.run(until_step=3)
    np.savez(tmp_path / "other.npz", X=np.random.default_rng(1).normal(size=(600, 3)), y=np.arange(600) % 2)
    ingest(open_source("npz", SourceRequest((tmp_path / "other.npz",))), tmp_path / "s.zarr", chunk_rows=64,
           test_size="0.2", overwrite=True)
    assert open_store(store.path).checksum != store.checksum
    with pytest.raises(InputError, match=r"does not match its digest: .*replaced while this run read it"):
        trainer.run()
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "run").rglob("manifest.json")]
    assert manifests and {m["dataset_checksum"] for m in manifests} == {store.checksum}
    # A new run in the same process reads the new store (arrays and digests are kept per store identity).
    assert train(TrainJob("sparse-gp-classifier", open_store(store.path), SHORT, None)).steps == 5


def test_a_zarr_v2_store_is_refused(tmp_path):
    group = zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    group.attrs.update(schema_version=1)
    with pytest.raises(InputError, match=r"v2.zarr: a Zarr v2 store; pep reads only Zarr format 3 stores"):
        open_store(tmp_path / "v2.zarr")


def test_two_writers_of_one_run_directory(tmp_path, binary_store):
    """Audit: two `pep train` into one directory deleted each other's checkpoints. The lock is the kernel's:
    refused while another process holds it, free again once that process is killed."""
    with held_by_another_process(tmp_path / "run") as pid:
        with pytest.raises(InputError, match=rf"run: in use by pep train \(pid {pid}\); wait for it to finish"):
            train(TrainJob("sparse-gp-classifier", binary_store, SHORT, tmp_path / "run"))
        assert not (tmp_path / "run" / "checkpoints").exists()
    assert train(TrainJob("sparse-gp-classifier", binary_store, SHORT, tmp_path / "run")).steps == 5


def test_a_missing_manifest_field_is_a_one_line_error(tmp_path, binary_store):
    """Audit: a missing or mistyped manifest field gave a raw KeyError/TypeError."""
    train(TrainJob("sparse-gp-classifier", binary_store, SHORT, tmp_path))
    path = next((tmp_path / "checkpoints").glob("step-*")) / "manifest.json"
    manifest = json.loads(path.read_text())
    for field, value in (("x_std", None), ("config", {"learning_rate": "fast"}), ("targets", {"shift": 0.0, "scale": 0.0})):
        changed = {k: v for k, v in manifest.items() if k != field}
        if value is not None:
            changed[field] = value
        path.write_text(json.dumps(changed))
        name = {"x_std": "x_std': Field required", "config": "config.learning_rate': Input should be a valid number",
                "targets": "targets.scale': Input should be greater than 0"}[field]
        with pytest.warns(CheckpointWarning), pytest.raises(InputError, match=rf"no intact checkpoint .*manifest field '{name}"):
            load_run(tmp_path)


def test_evaluate_follows_no_url_from_a_manifest(tmp_path, binary_store):
    """Audit: `pep evaluate` followed the manifest's `data` field to any URL: a received run directory chose
    what this machine fetched. The training store is also checked to still hold the run's data."""
    train(TrainJob("sparse-gp-classifier", binary_store, SHORT, tmp_path))
    path = next((tmp_path / "checkpoints").glob("step-*")) / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "data": "https://example.invalid/data.zarr"}))
    with pytest.raises(InputError, match=r"trained on https://example.invalid/data.zarr, a URL; pep evaluate reads a "
                                         r"URL only when you give it: pass --data"):
        evaluate(tmp_path)
    assert evaluate(tmp_path, binary_store.path)["n_test"] == 100
    other = make_store(tmp_path / "other.zarr", seed=1)
    path.write_text(json.dumps({**manifest, "data": other.path}))
    with pytest.raises(InputError, match=r"other.zarr: no longer the data .* was trained on"):
        evaluate(tmp_path)


def test_a_killed_ingest_leaves_nothing_for_long(tmp_path):
    """Audit: a killed ingest left hidden `.NAME.ingest-*` directories. A live ingest's staging directory
    is locked and kept; a dead one's is removed by the next ingest into the same store."""
    out = tmp_path / "s.zarr"
    script = ("import sys, os, signal; from pathlib import Path\n"
              "from pep_gp.pipeline.data.staging import staging_directory\n"
              "with staging_directory(Path(sys.argv[1])) as work:\n"
              "    (work / 'half-written').write_text('x'); print(work, flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGKILL if sys.argv[2] == 'die' else signal.SIGSTOP)\n")
    alive = subprocess.Popen([sys.executable, "-c", script, str(out), "stop"], stdout=subprocess.PIPE, text=True)
    try:
        live_work = alive.stdout.readline().strip()
        dead = subprocess.run([sys.executable, "-c", script, str(out), "die"], capture_output=True, text=True)
        assert dead.returncode == -signal.SIGKILL and os.path.isdir(dead.stdout.strip())
        assert remove_abandoned(out) == [tmp_path / dead.stdout.strip()]
        assert os.path.isdir(live_work)  # still locked by a running ingest
    finally:
        alive.kill()
        alive.wait()
        alive.stdout.close()
    np.savez(tmp_path / "d.npz", X=np.arange(40.0).reshape(20, 2), y=np.arange(20) % 2)
    ingest(open_source("npz", SourceRequest((tmp_path / "d.npz",))), out, test_size="5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "s.zarr"]


def test_the_overwrite_swap_is_atomic(tmp_path, monkeypatch):
    """Audit: a SIGKILL between the two renames of `--overwrite` left no store. The swap is one rename
    (RENAME_EXCHANGE): killed right after it, the store is the new one, whole, and the old one sits in a
    staging directory that the next ingest removes."""
    np.savez(tmp_path / "a.npz", X=np.arange(40.0).reshape(20, 2), y=np.arange(20) % 2)
    np.savez(tmp_path / "b.npz", X=-np.arange(60.0).reshape(30, 2), y=np.arange(30) % 2)
    out = tmp_path / "s.zarr"
    ingest(open_source("npz", SourceRequest((tmp_path / "a.npz",))), out, test_size="5")
    script = ("import os, signal, sys; from pathlib import Path\n"
              "import pep_gp.pipeline.data.staging as staging\n"
              "from pep_gp.pipeline.data.ingest import ingest\n"
              "from pep_gp.pipeline.data.sources import SourceRequest, open_source\n"
              "exchange = staging.exchange\n"
              "def exchange_then_die(a, b):\n    exchange(a, b); os.kill(os.getpid(), signal.SIGKILL)\n"
              "staging.exchange = exchange_then_die\n"
              "ingest(open_source('npz', SourceRequest((Path(sys.argv[1]),))), Path(sys.argv[2]), test_size='5', overwrite=True)\n")
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path / "b.npz"), str(out)])
    assert killed.returncode == -signal.SIGKILL
    store = open_store(out)
    assert store.n_rows("train") == 25
    store.verify()
    assert len(list(tmp_path.glob(".s.zarr.ingest-*"))) == 2  # the old store and its lock file
    ingest(open_source("npz", SourceRequest((tmp_path / "a.npz",))), out, test_size="5", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "b.npz", "s.zarr"]
