"""The store layout: writing, validated opening, chunk reads, checksums, and refusing bad stores."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import zarr

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.data.stores import (
    REQUIRED_ATTRS,
    SCHEMA_VERSION,
    create_split_arrays,
    data_checksum,
    finish_store,
    open_store,
    write_chunk,
)

N_ROWS = {"train": 25, "test": 7}
CHUNK_ROWS = 10


def write_arrays(path):
    """A classification store's arrays (3 features, 2 classes) without attributes; returns digests."""
    rng = np.random.default_rng(0)
    digests = {}
    for split, n_rows in N_ROWS.items():
        create_split_arrays(path, split, n_rows, 3, CHUNK_ROWS, "classification")
        digests[split] = [write_chunk(path, split, i, rng.normal(size=(min(CHUNK_ROWS, n_rows - s), 3)),
                                      np.arange(min(CHUNK_ROWS, n_rows - s)) % 2)
                          for i, s in enumerate(range(0, n_rows, CHUNK_ROWS))]
    return digests


def attrs_for(digests):
    """Complete attributes for the arrays of :func:`write_arrays`."""
    return {"schema_version": SCHEMA_VERSION, "task": "classification", "n_classes": 2,
            "feature_names": ["a", "b", "c"], "target_name": "label",
            "source": {"name": "test", "description": "generated", "checksum": "sha256:0"},
            "checksum": data_checksum(digests, 3), "x_mean": [0, 0, 0], "x_std": [1, 1, 1],
            "y_mean": None, "y_std": None, "split": "seeded", "split_seed": 0, "test_size": 7,
            "n_train": 25, "n_test": 7, "class_counts": None, "rows_dropped": {},
            "chunk_rows": CHUNK_ROWS, "created_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "s.zarr"
    finish_store(path, attrs_for(write_arrays(path)))
    return path


def test_open_read_chunks_and_verify(store_path):
    store = open_store(store_path)
    assert store.n_chunks("train") == 3 and store.n_chunks("test") == 1
    X, y = store.read_chunk("train", 2)
    assert X.shape == (5, 3) and X.dtype == np.float32 and y.dtype == np.int32
    X_all, _ = store.arrays("train")
    np.testing.assert_array_equal(X_all[20:], X)
    store.verify()
    assert pickle.loads(pickle.dumps(store)).checksum == store.checksum
    with pytest.raises(IndexError):
        store.read_chunk("train", 3)


def test_unfinished_store_is_refused(tmp_path):
    path = tmp_path / "s.zarr"
    write_arrays(path)
    with pytest.raises(InputError, match=r"s.zarr: unfinished store \(its attributes were never written"):
        open_store(path)


@pytest.mark.parametrize(("change", "message"), [
    ({"schema_version": 2}, r"attribute 'schema_version': expected 1, found 2"),
    ({"n_train": 24}, r"array 'train/X': expected shape \(24, 3\)"),
    ({"feature_names": ["a", "b"], "x_mean": [0, 0], "x_std": [1, 1]}, r"array 'train/X': expected shape \(25, 2\)"),
    ({"feature_names": ["a", "b"]}, r"attribute 'x_mean': expected 2 values \(one per feature\), found 3"),
    ({"task": "regression", "n_classes": None, "y_mean": 0.0, "y_std": 1.0},
     r"array 'train/y': .*dtype float32.*found .*dtype int32"),
    ({"task": "regression"}, r"attribute 'n_classes': expected a class count for classification and null"),
    ({"task": "ranking"}, r"attribute 'task': expected one of"),
    # values a trainer divides by, allocates by or compares with: checked before any use
    ({"x_std": [1, 0, 1]}, r"attribute 'x_std'\[1\]: Input should be greater than 0 \(found 0\)"),
    ({"x_mean": [0, float("nan"), 0]}, r"attribute 'x_mean'\[1\]: Input should be a finite number"),
    ({"n_classes": 2_000_000_000}, r"attribute 'n_classes': Input should be less than or equal to 10000"),
    ({"chunk_rows": 10**9}, r"attribute 'chunk_rows': expected a row count from 1 to 5,592,405 .*found 1,000,000,000"),
    ({"checksum": "md5:0"}, r"attribute 'checksum': String should match pattern"),
])
def test_inconsistent_attributes_are_refused(tmp_path, change, message):
    path = tmp_path / "s.zarr"
    finish_store(path, {**attrs_for(write_arrays(path)), **change})
    with pytest.raises(InputError, match=message):
        open_store(path)


def test_missing_attribute_and_missing_store(tmp_path):
    path = tmp_path / "s.zarr"
    attrs = attrs_for(write_arrays(path))
    zarr.open_group(str(path), mode="r+").attrs.update({k: v for k, v in attrs.items() if k != "x_std"})
    with pytest.raises(InputError, match=r"unfinished store, attributes \['x_std'\] are missing"):
        open_store(path)
    with pytest.raises(InputError, match=r"nothing.zarr: no such store"):
        open_store(tmp_path / "nothing.zarr")
    with pytest.raises(ValueError, match="lack"):
        finish_store(path, {"schema_version": 1})
    assert len(REQUIRED_ATTRS) == len(attrs)


def test_verify_detects_modified_data(store_path):
    zarr.open_array(str(store_path / "test" / "X"), mode="r+")[0, 0] = 42.0
    with pytest.raises(InputError, match="data does not match the store's checksum"):
        open_store(store_path).verify()
