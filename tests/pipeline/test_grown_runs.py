"""A run continued on a store grown by appends: it keeps its frame, trains over the grown rows (or only the
new ones), and a grown run resumed again, or from the same checkpoint again, takes the same steps."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from pep_gp.pipeline.data.append import append
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs import checkpoint
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from pep_gp.pipeline.engine import InProcess
from tests.trainstores import FAST, leaves_equal

CONFIG = FAST.model_copy(update={"epochs": 1})


def npz(path, x, y):
    np.savez(path, X=x, y=y)
    return open_source("npz", SourceRequest((path,), None, "classification"))


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A store of 300 rows, a one-epoch run on it, then 200 more rows appended: (store, run directory)."""
    tmp = tmp_path_factory.mktemp("grown")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 3))
    y = (x[:, 0] + x[:, 1] ** 2 > 0.5).astype(np.int64)
    store = tmp / "s.zarr"
    ingest(npz(tmp / "a.npz", x[:300], y[:300]), store, chunk_rows=64, test_size="0.2")
    first = open_store(store)
    train(TrainJob("sparse-gp-classifier", first, CONFIG, tmp / "run"))
    append(npz(tmp / "b.npz", x[300:], y[300:]), store, seed=1)
    return first, open_store(store), tmp / "run"


def copy_run(run, to):
    shutil.copytree(run, to)
    return to


def test_a_run_resumes_on_its_grown_store_in_its_own_frame(grown, tmp_path):
    first, store, run = grown
    before = checkpoint.newest_manifest(run)
    trainer = Trainer(TrainJob("sparse-gp-classifier", store, CONFIG, copy_run(run, tmp_path / "a")), InProcess())
    result = trainer.run(resume=True)
    after = checkpoint.newest_manifest(tmp_path / "a")
    g = before["total_steps"]
    assert trainer.n_total == store.n_rows("train") == 400 and first.n_rows("train") == 240
    assert result.steps == after["total_steps"] == g + trainer.schedule.steps_per_epoch  # one epoch, from step g
    assert trainer.schedule.steps_per_epoch == 5 and before["steps_per_epoch"] == 3  # 9 blocks of 48, 2 a step
    assert after["x_mean"] == before["x_mean"] != store.attrs["x_mean"]  # the frame of version 1
    assert after["dataset_checksum"] == store.checksum
    assert [(e["step"], e["checksum"]) for e in after["data_log"]] == [(0, first.checksum), (g, store.checksum)]
    assert [r["epoch"] for r in result.history] == [1, 2] and np.isfinite(result.history[-1]["test_nll"])


@pytest.mark.heavy
def test_a_grown_run_is_reproducible(grown, tmp_path):
    _, store, run = grown
    job = lambda name: TrainJob("sparse-gp-classifier", store, CONFIG, copy_run(run, tmp_path / name))
    whole = Trainer(job("whole"), InProcess()).run(resume=True)
    again = Trainer(job("again"), InProcess()).run(resume=True)
    interrupted = job("interrupted")
    Trainer(interrupted, InProcess()).run(resume=True, until_step=whole.steps - 2)  # a checkpoint after growing
    resumed = Trainer(interrupted, InProcess()).run(resume=True)
    assert leaves_equal(whole.params, again.params) and leaves_equal(whole.params, resumed.params)
    assert resumed.steps == whole.steps


def test_new_rows_only_takes_its_epochs_over_the_new_rows(grown, tmp_path):
    _, store, run = grown
    job = TrainJob("sparse-gp-classifier", store, CONFIG, copy_run(run, tmp_path / "n"), new_rows_only=True)
    trainer = Trainer(job, InProcess())
    result = trainer.run(resume=True)
    g = trainer.schedule.start_step
    assert trainer.schedule.first_block == 240 // 48 == 5  # the blocks from the first holding new rows
    drawn = sorted({b for s in range(g, result.steps) for b in trainer.schedule.blocks(s)})
    assert drawn == [5, 6, 7, 8] and result.steps == g + 2  # 4 blocks, 2 a step
    Trainer(TrainJob("sparse-gp-classifier", store, CONFIG, tmp_path / "fresh"), InProcess()).run(until_step=1)
    with pytest.raises(InputError, match="--new-rows-only: .* has not grown since"):
        Trainer(TrainJob("sparse-gp-classifier", store, CONFIG, tmp_path / "fresh", new_rows_only=True),
                InProcess()).run(resume=True)


def test_a_store_of_other_data_is_still_refused(grown, tmp_path):
    _, _, run = grown
    rng = np.random.default_rng(5)
    other = tmp_path / "o.zarr"
    ingest(npz(tmp_path / "o.npz", rng.normal(size=(300, 3)), np.arange(300) % 2), other, chunk_rows=64)
    with pytest.raises(InputError, match="this run was trained on"):
        Trainer(TrainJob("sparse-gp-classifier", open_store(other), CONFIG, copy_run(run, tmp_path / "o")),
                InProcess()).run(resume=True)
