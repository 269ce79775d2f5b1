"""Appending rows to real Zarr stores (`pep ingest … --append STORE`): the grown store equals one ingested
from the concatenated input, new categories and labels are refused, a failed append changes nothing, and a
second process's append is refused."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.data.append import append, lock_path, versions
from pep_gp.pipeline.data.chunks import chunk_digest, data_checksum
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import SPLITS, open_store
from pep_gp.pipeline.errors import InputError
from tests import datafiles
from tests.trainstores import held_by_another_process


def mnist_parts(directory, sizes):
    """MNIST-format directories, one per (n_train, n_test) of ``sizes``, and one of their concatenation."""
    parts = []
    for k, (n_train, n_test) in enumerate(sizes):
        parts.append(datafiles.write_mnist(directory / f"part{k}", n_train, n_test, seed=k))
    whole = directory / "whole"
    whole.mkdir()
    for name in parts[0]:
        array = np.concatenate([part[name] for part in parts])
        (whole / f"{name}.gz").write_bytes(gzip.compress(datafiles.idx_bytes(array), mtime=0))
    return [directory / f"part{k}" for k in range(len(sizes))], whole


def mnist(directory):
    return open_source("mnist", SourceRequest((directory,)))


def normalised_checksum(store):
    """The store's checksum after putting each split's rows in sorted order (chunk order, and the order of
    rows within and across chunks, is the shuffle's; the rows themselves are the data)."""
    digests = {}
    for split in SPLITS:
        X, y = (a[:] for a in store.arrays(split))
        order = np.lexsort(np.column_stack([X, y]).T[::-1])
        X, y = X[order], y[order]
        digests[split] = [chunk_digest(X[i:i + store.chunk_rows], y[i:i + store.chunk_rows])
                          for i in range(0, len(y), store.chunk_rows)]
    return data_checksum(digests, len(store.feature_names))


def store_files(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_store_appended_twice_equals_one_ingested_from_the_concatenation(tmp_path):
    parts, whole = mnist_parts(tmp_path, [(40, 13), (25, 7), (31, 9)])
    grown, reference = tmp_path / "grown.zarr", tmp_path / "reference.zarr"
    ingest(mnist(parts[0]), grown, chunk_rows=16)
    first = open_store(grown)
    append(mnist(parts[1]), grown, seed=1)
    summary = append(mnist(parts[2]), grown, seed=2)
    ingest(mnist(whole), reference, chunk_rows=16)
    store, ref = open_store(grown), open_store(reference)
    store.verify()
    assert (summary.rows_train, summary.rows_test) == (96, 29) == (ref.n_rows("train"), ref.n_rows("test"))
    assert normalised_checksum(store) == normalised_checksum(ref) != store.checksum
    assert store.attrs["class_counts"] == ref.attrs["class_counts"]
    np.testing.assert_allclose(store.attrs["x_mean"], ref.attrs["x_mean"], rtol=1e-12)  # rows in another order
    np.testing.assert_allclose(store.attrs["x_std"], ref.attrs["x_std"], rtol=1e-12)
    # The old rows keep their chunks: every whole chunk of the first version is still there, unchanged.
    assert store.attrs["chunk_digests"]["train"][:2] == first.attrs["chunk_digests"]["train"][:2]
    history = versions(store)
    assert [v["version"] for v in history] == [1, 2, 3]
    assert [v["rows_added"] for v in history] == [{"train": 40, "test": 13}, {"train": 25, "test": 7},
                                                  {"train": 31, "test": 9}]
    assert history[0]["checksum"] == first.checksum and history[-1]["checksum"] == store.checksum


@pytest.fixture
def city_store(tmp_path):
    """A table store with a text feature (city) and text labels (yes/no), split by seed."""
    def table(name, rows):
        path = tmp_path / name
        path.write_text("city,x,label\n" + "".join(f"{c},{x},{l}\n" for c, x, l in rows))
        return path

    rows = [(("Paris", "Lyon")[i % 2], round(0.1 * i, 1), ("yes", "no")[i % 3 == 0]) for i in range(60)]
    ingest(open_source("csv", SourceRequest((table("first.csv", rows),), "label")), tmp_path / "s.zarr",
           chunk_rows=8, test_size="0.25", seed=0)
    return tmp_path / "s.zarr", table


def test_appended_table_rows_use_the_stores_transformation_and_split_rule(city_store):
    out, table = city_store
    before = open_store(out)
    new = table("new.csv", [("Lyon", 100.0, "yes"), ("Paris", -3.5, "no")] * 10)
    append(open_source("csv", SourceRequest((new,), "label")), out, seed=4)
    store = open_store(out)
    store.verify()
    assert store.transforms == before.transforms  # offsets, categories and labels as first ingested
    assert (store.n_rows("train"), store.n_rows("test")) == (60, 20)  # a quarter of the new rows: 5 test rows
    X, y = (a[:] for a in store.arrays("train"))
    added = X[45:] + store.transforms.offsets  # columns: city=Lyon, city=Paris, x
    assert set(added[:, 2].round(4)) == {100.0, -3.5} and set(X[:45, 2] + store.transforms.offsets[2]) != {100.0, -3.5}
    assert set(np.unique(y[45:])) == {0, 1}


@pytest.mark.parametrize("row, named", [(("Nice", 1.0, "yes"), "new category 'Nice' (1 row)"),
                                        (("Paris", 1.0, "maybe"), "new class label 'maybe' (1 row)")])
def test_a_new_category_or_label_is_refused_and_the_store_is_unchanged(city_store, row, named):
    out, table = city_store
    files = store_files(out)
    new = table("new.csv", [("Lyon", 2.0, "no"), row])
    with pytest.raises(InputError, match=re.escape(named)):
        append(open_source("csv", SourceRequest((new,), "label")), out)
    assert store_files(out) == files and not list(out.parent.glob(".s.zarr.ingest-*"))


def test_a_failed_append_leaves_the_store_as_it_was(tmp_path):
    parts, _ = mnist_parts(tmp_path, [(40, 13), (60, 20)])
    out = tmp_path / "s.zarr"
    ingest(mnist(parts[0]), out, chunk_rows=16)
    files = store_files(out)
    source = mnist(parts[1])
    blocks = list(source.read())
    bad = dataclasses.replace(blocks[0], X=blocks[0].X.copy())
    bad.X[5, 3] = np.nan  # a bad row in the middle of the new rows
    with pytest.raises(InputError, match="expected a finite number"):
        append(dataclasses.replace(source, read=lambda: iter([blocks[0], bad, *blocks[1:]])), out)
    assert store_files(out) == files

    def fail_midway(phase, done, total):  # after the first grown chunk is written into the new store
        if phase == "write" and done == 2:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        append(source, out, progress=fail_midway)
    assert store_files(out) == files and not list(tmp_path.glob(".s.zarr.ingest-*"))
    open_store(out).verify()


def test_a_second_process_cannot_append_while_one_does(tmp_path):
    parts, _ = mnist_parts(tmp_path, [(30, 10), (10, 5)])
    out = tmp_path / "s.zarr"
    ingest(mnist(parts[0]), out, chunk_rows=16)
    with held_by_another_process(out, "pep_gp.pipeline.data.append.hold_store") as pid:
        with pytest.raises(InputError, match=rf"in use by pep ingest --append \(pid {pid}\)"):
            append(mnist(parts[1]), out)
    append(mnist(parts[1]), out)  # the lock went with its holder
    assert open_store(out).n_rows("train") == 40 and lock_path(out).exists()


def test_ingest_append_on_the_command_line(city_store):
    out, table = city_store
    new = table("new.csv", [("Lyon", 2.0, "no")] * 4)
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "csv", "--input", str(new), "--target", "label", "--append", str(out),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows_train"] == 48
    refused = runner.invoke(app, ["ingest", "csv", "--input", str(new), "--target", "label", "--append", str(out),
                                  "--test-size", "0.5"])
    assert refused.exit_code != 0 and "--test-size: --append uses the store's own" in refused.output

