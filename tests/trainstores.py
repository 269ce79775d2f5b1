"""Small real stores and configs for training tests (ingested from .npz files in a temp dir)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import zarr

from pep_gp.pipeline.data.chunks import chunk_digest, data_checksum
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import Store, open_store

# make_store's 400 training rows in 9 blocks of 48 (the last one padded: 16 rows), two blocks per step:
# 5 steps per epoch, the last one with a single block.
FAST = TrainConfig(model={"num_inducing": 6}, epochs=3, batch_size=96, block_rows=48, learning_rate=0.05,
                   checkpoint_every=4, keep_checkpoints=2)

PAIRWISE = {"likelihood": "pairwise", "train_inducing": True}
"""The multi-class settings the pipeline's tests train with: the paper's pairwise likelihood (eq. 6) with learned
inducing inputs, stated so that they do not hang on what ``likelihood = "auto"`` takes (the same today;
tests/pipeline/test_multiclass_defaults.py tests that choice)."""

MULTICLASS_MODELS = ("multiclass-sep", "multiclass-direct")


def config_for(model: str, config: TrainConfig = FAST) -> TrainConfig:
    """``config`` with :data:`PAIRWISE` under its own model settings for the multi-class models, as it is for the
    others."""
    if model not in MULTICLASS_MODELS:
        return config
    return config.model_copy(update={"model": {**PAIRWISE, **config.model}})


def make_store(path: Path, task: str = "classification", n_rows: int = 500, n_features: int = 3,
               chunk_rows: int = 64, seed: int = 0, n_classes: int = 2) -> Store:
    """Ingest a synthetic task (``x0 + x1² > 0.5`` labels; for ``n_classes`` > 2 the class of the largest
    of ``x0``, ``x1``, ``x1²−1``, … plus noise; or ``sin(2 x0) + noise``) into ``path``; a fifth of the
    rows go to the test split."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, n_features))
    if task == "classification" and n_classes > 2:
        scores = np.stack([x[:, 0], x[:, 1], *(x[:, 1] ** 2 - k for k in range(1, n_classes - 1))], axis=1)
        y = np.argmax(scores + 0.3 * rng.normal(size=scores.shape), axis=1)
    elif task == "classification":
        y = (x[:, 0] + x[:, 1] ** 2 > 0.5).astype(np.int64)
    else:
        y = np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=n_rows)
    npz = path.with_suffix(".npz")
    np.savez(npz, X=x, y=y)
    ingest(open_source("npz", SourceRequest((npz,), None, task)), path, chunk_rows=chunk_rows,
           test_size="0.2", seed=seed)
    return open_store(path)


def config_toml(config: TrainConfig) -> str:
    """``config`` as a TOML file's text (unset, None-valued fields left out; model settings in ``[model]``)."""
    values = config.model_dump(exclude_none=True)
    lines = [f"{key} = {json.dumps(value)}\n" for key, value in values.items() if key != "model"]
    return "".join(lines + ["[model]\n"] + [f"{key} = {json.dumps(value)}\n" for key, value in values["model"].items()])


def leaves_equal(a, b) -> bool:
    """True when two pytrees have the same structure and bit-identical leaves."""
    left, right = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
            and all(np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(left, right)))


@contextlib.contextmanager
def held_by_another_process(run_dir: Path, lock: str = "pep_gp.pipeline.runs.lock.hold_run_dir") -> Iterator[int]:
    """A second process holding ``run_dir``'s lock (as a running ``pep train`` would; or the lock named by
    ``lock``, e.g. a store's append lock) for the block; its pid. SIGKILLed at the end: the kernel releases it."""
    module, function = lock.rsplit(".", 1)
    holder = subprocess.Popen([sys.executable, "-c", (
        f"import sys, time; from pathlib import Path; from {module} import {function}\n"
        f"with {function}(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)"), str(run_dir)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()


def chunk_files(store_path, array):
    """The chunk files of ``array`` (e.g. ``"train/X"``) of a store, in chunk order."""
    files = [p for p in (store_path / array / "c").rglob("*") if p.is_file()]
    return sorted(files, key=lambda p: [int(part) for part in p.relative_to(store_path / array / "c").parts])


def rewrite_consistently(store_path, split, index, edit):
    """Edit chunk ``index`` of ``split`` and recompute its digest and the store's checksum, as a crafted
    store would (so only the checks on the values themselves can catch it)."""
    root = zarr.open_group(str(store_path), mode="r+")
    X, y = root[f"{split}/X"], root[f"{split}/y"]
    rows = slice(index * X.chunks[0], (index + 1) * X.chunks[0])
    new_X, new_y = edit(X[rows], y[rows])
    X[rows], y[rows] = new_X, new_y
    attrs = root.attrs.asdict()
    attrs["chunk_digests"][split][index] = chunk_digest(new_X, new_y)
    root.attrs.update(chunk_digests=attrs["chunk_digests"],
                      checksum=data_checksum(attrs["chunk_digests"], len(attrs["feature_names"])))
