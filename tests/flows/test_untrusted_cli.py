"""Issue 27's audit cases at the command line: each ends in one line on stderr naming what was wrong, exit
code 2 for bad input and 1 for a failed run, never a traceback or a silent success; and no JSON that pep
writes holds ``NaN`` or ``Infinity``. (The library-level checks are in
``tests/pipeline/test_untrusted_data.py``.)"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.pipeline.toy_model import ToySpec
from tests.trainstores import FAST, chunk_files, config_toml, held_by_another_process, make_store, rewrite_consistently

SHORT = FAST.model_copy(update={"epochs": 1, "checkpoint_every": 100})


def pep(*args):
    """``pep ARGS`` in-process."""
    return CliRunner().invoke(app, [*map(str, args)])


def one_line_error(result, code: int, message: str) -> bool:
    # the training display's own lines (a blank in a terminal, "training: …" summaries without one) aside
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("training: ")]
    return result.exit_code == code and len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("untrusted") / "binary.zarr")


@pytest.fixture(scope="module")
def trained(store, tmp_path_factory):
    """A finished run of one checkpoint."""
    run_dir = tmp_path_factory.mktemp("untrusted") / "run"
    train(TrainJob("sparse-gp-classifier", store, SHORT, run_dir))
    return run_dir


def train_args(store, run_dir, *extra):
    return ("train", "--model", "sparse-gp-classifier", "--data", store, "--run-dir", run_dir, "--batch-size", 96, *extra)


def copy_of(path, tmp_path):
    shutil.copytree(path, tmp_path / path.name)
    return tmp_path / path.name


@pytest.mark.parametrize("edit, message", [
    (lambda attrs: attrs["x_std"].__setitem__(1, 0.0), "attribute 'x_std'[1]: Input should be greater than 0"),
    (lambda attrs: attrs.update(n_classes=2_000_000_000), "attribute 'n_classes': Input should be less than or equal to 10000"),
])
def test_bad_store_attributes(store, tmp_path, edit, message):
    path = copy_of(Path(store.path), tmp_path)
    attrs = zarr.open_group(str(path), mode="r").attrs.asdict()
    edit(attrs)
    zarr.open_group(str(path), mode="r+").attrs.update(attrs)
    assert one_line_error(pep(*train_args(path, tmp_path / "run")), 2, message)
    assert not (tmp_path / "run").exists()


def test_zarr_v2_store_and_seed_beyond_32_bits(store, tmp_path):
    zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2).attrs.update(schema_version=1)
    assert one_line_error(pep(*train_args(tmp_path / "v2.zarr", tmp_path / "run")), 2,
                          "v2.zarr: a Zarr v2 store; pep reads only Zarr format 3 stores")
    config = tmp_path / "seed.toml"
    config.write_text(config_toml(FAST).replace("seed = 0", "seed = 100000000000000000000"))
    assert "seed = 100000000000000000000" in config.read_text()
    assert one_line_error(pep(*train_args(store.path, tmp_path / "run", "--config", config)), 2,
                          "seed: Input should be less than or equal to 4294967295")
    assert not (tmp_path / "run").exists()


@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_deleted_chunk_or_a_label_outside_the_classes_fails_the_run(store, tmp_path):
    path = copy_of(Path(store.path), tmp_path)
    chunk_files(path, "test/y")[0].unlink()
    result = pep(*train_args(path, tmp_path / "run", "--config", _config(tmp_path, SHORT)))
    assert one_line_error(result, 2, "test chunk 0 (rows 0..63) does not match its digest")
    crafted = copy_of(Path(store.path), tmp_path / "crafted")  # labels rewritten with consistent digests
    rewrite_consistently(crafted, "train", 0, lambda X, y: (X, np.where(np.arange(len(y)) == 3, 7, y)))
    result = pep(*train_args(crafted, tmp_path / "run2", "--config", _config(tmp_path, SHORT)))
    assert one_line_error(result, 2, "binary.zarr: train: row 3: expected a class label in 0..1, found 7")


def strict_json(text: str):
    """``text`` parsed as strict JSON: NaN, Infinity and -Infinity fail the test."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON pep wrote"))


@pytest.mark.heavy
def test_an_idling_toy_run_exits_1_and_its_json_is_strict(monkeypatch, tmp_path):
    """The stop rule at the command line, on the toy model whose first step jumps past its NaN trap: exit 1
    with one line at step 11, and the manifest's history (epochs with no finite energy) is strict JSON."""
    monkeypatch.setitem(MODELS, "toy", ToySpec(nan_above=0.01))
    store = make_store(tmp_path / "regression.zarr", task="regression")
    run_dir = tmp_path / "run"
    result = pep("train", "--model", "toy", "--data", store.path, "--run-dir", run_dir, "--json",
                 "--config", _config(tmp_path, FAST.model_copy(update={"epochs": 12, "model": {}})))
    assert one_line_error(result, 1, "training stopped at step 11 of 60: the last 10 steps were all rejected")
    manifests = {m["step"]: m for m in (strict_json(p.read_text()) for p in run_dir.rglob("manifest.json"))}
    assert manifests[11]["rejected_steps"] == 10 and manifests[11]["history"][1]["energy"] is None


@pytest.mark.exhaustive
@pytest.mark.slow
def test_an_idling_run_fails_and_no_json_holds_nan(store, tmp_path):
    """Audit: at learning rate 100, 59 of 60 steps were rejected and `pep train` exited 0, its `--json` and
    `metrics.json` holding a bare `NaN`. Now the run stops after 10 rejected steps in a row (exit 1);
    `pep evaluate` of its checkpoint reports the NaN test NLL as null and fails too; every JSON document
    written (stdout, metrics.json, the manifest with its history) is strict JSON."""
    config = _config(tmp_path, FAST.model_copy(update={"learning_rate": 100.0, "epochs": 12}))
    run_dir = tmp_path / "run"
    trained = pep("train", "--model", "deep-gp-classifier", "--data", store.path, "--run-dir", run_dir,
                  "--config", config, "--json")
    assert one_line_error(trained, 1, "training stopped at step 11 of 60: the last 10 steps were all rejected")
    assert trained.stdout == ""
    evaluated = pep("evaluate", "--run-dir", run_dir, "--json")
    assert one_line_error(evaluated, 1, "non-finite test_nll at step 11")
    files = sorted(run_dir.rglob("*.json"))  # metrics.json, the manifest and Zarr's own zarr.json files
    assert {"metrics.json", "manifest.json"} <= {p.name for p in files}
    parsed = [strict_json(text) for text in [evaluated.stdout] + [p.read_text() for p in files]]
    assert parsed[0]["test_nll"] is None
    assert any(record["test_nll"] is None for p in parsed[1:] for record in p.get("history", []))


def test_only_damaged_checkpoints_and_a_missing_manifest_field(trained, store, tmp_path):
    run_dir = copy_of(trained, tmp_path)
    manifest = next(run_dir.rglob("manifest.json"))
    manifest.write_text(json.dumps({k: v for k, v in json.loads(manifest.read_text()).items() if k != "model"}))
    assert one_line_error(pep("evaluate", "--run-dir", run_dir), 2,
                          "no intact checkpoint to continue from (step-00000005: it is damaged (manifest field 'model': "
                          "Field required))")
    resumed = pep(*train_args(store.path, run_dir, "--resume"))
    assert one_line_error(resumed, 2, "no intact checkpoint to continue from")
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000005"]


def test_a_leaf_claiming_a_huge_shape_is_refused_before_it_is_read(trained, tmp_path):
    """Audit: a leaf's zarr.json claiming shape (3, 5, 4e9) allocated 447 GiB."""
    run_dir = copy_of(trained, tmp_path)
    meta = next(run_dir.rglob("params/0000/zarr.json"))
    array = json.loads(meta.read_text())
    array["shape"] = array["chunk_grid"]["configuration"]["chunk_shape"] = [3, 5, 4_000_000_000]
    meta.write_text(json.dumps(array))
    assert one_line_error(pep("evaluate", "--run-dir", run_dir), 2,
                          "array 'params/0000' has shape [3, 5, 4000000000]")


def test_a_manifest_url_is_not_followed(trained, tmp_path):
    run_dir = copy_of(trained, tmp_path)
    manifest = next(run_dir.rglob("manifest.json"))
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "data": "s3://someone-else/data.zarr"}))
    assert one_line_error(pep("evaluate", "--run-dir", run_dir), 2,
                          "trained on s3://someone-else/data.zarr, a URL; pep evaluate reads a URL only when you give it")


def test_a_second_writer_is_refused(store, tmp_path):
    with held_by_another_process(tmp_path / "run") as pid:
        result = pep(*train_args(store.path, tmp_path / "run", "--config", _config(tmp_path, SHORT)))
        assert one_line_error(result, 2, f"run: in use by pep train (pid {pid})")


@pytest.mark.parametrize("make, args, message", [
    ("npz_claiming_1e9_columns", (), "array 'X': its header claims shape (10, 1000000000)"),
    ("npz_with_label_2e9", ("--chunk-rows", 10**9), "--chunk-rows: expected a row count from 1 to 5,592,405"),
])
def test_ingest_bounds_what_headers_and_options_claim(tmp_path, make, args, message):
    path = tmp_path / "d.npz"
    if make == "npz_claiming_1e9_columns":
        from tests.pipeline.test_sources import npy_header

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("X.npy", npy_header((10, 1_000_000_000)))
            archive.writestr("y.npy", npy_header((10,), "<i8") + np.arange(10).tobytes())
    else:
        y = np.arange(40) % 2
        y[7] = 2_000_000_000
        np.savez(path, X=np.ones((40, 3)), y=y)
    result = pep("ingest", "npz", "--input", path, "--out", tmp_path / "s.zarr", "--quiet", *args)
    assert one_line_error(result, 2, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]


def test_a_label_of_2e9_is_a_class_value_not_an_index(tmp_path):
    """Labels are values mapped to 0..C-1 at ingest: 2e9 among 0s and 1s is a third class, and nothing is
    sized by it (the audit's 14.9 GiB ``bincount``). ``--task auto`` asks about such integers (issue 62,
    item 1: not consecutive), and ``--task classification`` takes them as classes."""
    y = np.arange(40) % 2
    y[7] = 2_000_000_000
    np.savez(tmp_path / "d.npz", X=np.ones((40, 3)), y=y)
    asked = pep("ingest", "npz", "--input", tmp_path / "d.npz", "--out", tmp_path / "s.zarr", "--quiet")
    assert one_line_error(asked, 2, "3 distinct integers from 0 to 2000000000, 1999999998 of the values between "
                                    "them absent: counts or class labels?")
    result = pep("ingest", "npz", "--input", tmp_path / "d.npz", "--out", tmp_path / "s.zarr", "--quiet",
                 "--task", "classification")
    assert result.exit_code == 0, result.output
    store = open_store(tmp_path / "s.zarr")
    assert store.n_classes == 3 and list(store.attrs["transforms"]["labels"]) == [0, 1, 2_000_000_000]


def _config(tmp_path, config) -> str:
    path = tmp_path / "config.toml"
    path.write_text(config_toml(config))
    return str(path)


@pytest.mark.parametrize("received, entry, make, message", [
    ("run", "params/0000/c/0/0", "zero", "a symlink to /dev/zero, outside"),  # the kernel's lengthscales, [1, 1]
    ("run", "manifest.json", "fifo", "manifest.json: a FIFO, not a regular file"),
    ("store", "train/X/c/1/0", "zero", "a symlink to /dev/zero, outside"),
    ("store", "zarr.json", "fifo", "zarr.json: a FIFO, not a regular file"),
])
def test_a_symlink_out_or_a_fifo_in_a_received_directory_is_refused(trained, store, tmp_path, received, entry,
                                                                     make, message):
    """Audit: a chunk symlinked to /dev/zero or a FIFO inside a run directory or a store was read (for ever,
    or until memory ran out). Both are refused, naming the file, before anything in the directory is read."""
    run_dir, data = copy_of(trained, tmp_path / "r"), copy_of(Path(store.path), tmp_path / "s")
    root = next((run_dir / "checkpoints").iterdir()) if received == "run" else data
    (root / entry).unlink()
    if make == "zero":
        (root / entry).symlink_to("/dev/zero")
    else:
        os.mkfifo(root / entry)
    assert one_line_error(pep("evaluate", "--run-dir", run_dir, "--data", data), 2, message)


def test_a_manifest_claiming_4e9_inducing_inputs_is_refused_before_anything_is_sized(trained, tmp_path):
    """Audit: `num_inducing = 4e9` in a manifest asked for 149 GiB. The settings are checked against the
    params the checkpoint stores, and the stored leaves are bounded, before any allocation."""
    run_dir = copy_of(trained, tmp_path)
    path = next(run_dir.rglob("manifest.json"))
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "model_settings": {**manifest["model_settings"], "num_inducing": 4_000_000_000}}))
    assert one_line_error(pep("evaluate", "--run-dir", run_dir), 2,
                          "manifest field 'model_settings.num_inducing': 4,000,000,000 inducing inputs in 3 dimensions, "
                          "more than the")
    manifest["leaves"]["params"][0]["shape"] = [4_000_000_000, 3]
    path.write_text(json.dumps(manifest))
    assert one_line_error(pep("evaluate", "--run-dir", run_dir), 2, "bytes, more than the 8 GiB a checkpoint may hold")
