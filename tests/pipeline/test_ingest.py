"""Streaming ingest into real Zarr stores with real Dask: contents, statistics, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR
from pep_gp.pipeline.data.stores import open_store
from tests import datafiles


def csv_source(path, **request):
    return open_source("csv", SourceRequest((path,), "label", **request))


def store_rows(store):
    """All rows of a store's train and test splits as one sorted (n, D + 1) array."""
    rows = [np.column_stack([X[:], y[:]]) for X, y in map(store.arrays, ("train", "test"))]
    rows = np.concatenate(rows)
    return rows[np.lexsort(rows.T[::-1])]


def test_csv_ingest_contents_split_and_statistics(tmp_path):
    values = datafiles.write_table(tmp_path / "t.csv", n_rows=1000)
    reports = []
    summary = ingest(csv_source(tmp_path / "t.csv"), tmp_path / "s.zarr", chunk_rows=64,
                     test_size="0.25", seed=3, progress=lambda *a: reports.append(a))
    store = open_store(tmp_path / "s.zarr")
    assert (summary.rows_train, summary.rows_test, summary.n_classes) == (750, 250, 3)
    assert store.n_chunks("train") == 12 and store.read_chunk("train", 11)[0].shape == (46, 3)
    offsets = store.transforms.offsets  # the features are decimals: float32 holds them less their means
    np.testing.assert_allclose(offsets, values[:, :-1].mean(axis=0), rtol=1e-12)
    expected = np.column_stack([values[:, :-1] - offsets, values[:, -1]]).astype(np.float32)
    np.testing.assert_array_equal(store_rows(store), expected[np.lexsort(expected.T[::-1])])
    X_train, y_train = (a[:] for a in store.arrays("train"))
    np.testing.assert_allclose(store.attrs["x_mean"], X_train.astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(store.attrs["x_std"], X_train.astype(np.float64).std(0), rtol=1e-12)
    assert store.attrs["class_counts"]["train"] == np.bincount(y_train).tolist()
    assert store.attrs["split_seed"] == 3 and store.task == "classification"
    assert {phase for phase, *_ in reports} == {"scan", "read", "write"} and reports[-1] == ("write", 16, 16)
    store.verify()


def test_same_input_and_seed_give_byte_identical_arrays(tmp_path):
    datafiles.write_table(tmp_path / "t.csv", n_rows=500)
    stores = [tmp_path / name for name in ("a.zarr", "b.zarr", "c.zarr")]
    for store, seed in zip(stores, (7, 7, 8)):
        ingest(csv_source(tmp_path / "t.csv"), store, chunk_rows=100, seed=seed)
    chunk_files = [{p.relative_to(s): p.read_bytes() for p in s.rglob("*/c/**/*") if p.is_file()}
                   for s in stores]
    assert chunk_files[0] == chunk_files[1] and len(chunk_files[0]) == 10   # (4 + 1 chunks) x (X, y)
    checksums = [open_store(s).checksum for s in stores]
    assert checksums[0] == checksums[1] != checksums[2]


def test_regression_sklearn_and_integer_count(tmp_path):
    summary = ingest(open_source("sklearn:diabetes"), tmp_path / "d.zarr", test_size="100")
    store = open_store(tmp_path / "d.zarr")
    y = store.arrays("train")[1][:]
    assert (summary.rows_test, summary.n_classes, summary.class_counts) == (100, None, None)
    assert y.dtype == np.float32
    assert store.attrs["y_mean"] == pytest.approx(y.astype(np.float64).mean(), rel=1e-12)
    assert store.attrs["y_std"] == pytest.approx(y.astype(np.float64).std(), rel=1e-12)


def test_source_split_mnist_and_airline_data_expo(tmp_path):
    datafiles.write_mnist(tmp_path / "m")
    summary = ingest(open_source("mnist", SourceRequest((tmp_path / "m",))), tmp_path / "m.zarr")
    store = open_store(tmp_path / "m.zarr")
    assert (summary.rows_train, summary.rows_test, summary.n_features) == (50, 20, 16)
    assert store.attrs["split"] == "source" and store.attrs["split_seed"] is None
    X = store.arrays("test")[0][:]
    assert 0 <= X.min() and X.max() <= 1
    with pytest.raises(InputError, match="--test-size: source 'mnist' has its own train/test split"):
        ingest(open_source("mnist", SourceRequest((tmp_path / "m",))), tmp_path / "x.zarr",
               test_size="0.2")
    inputs = datafiles.write_data_expo(tmp_path)
    summary = ingest(open_source("airline", SourceRequest(inputs)), tmp_path / "a.zarr", test_size="2")
    assert (summary.rows_train, summary.rows_test, summary.n_features) == (5, 2, 8)
    assert summary.rows_dropped_total == 5 and summary.rows_dropped["plane has no year of manufacture"] == 2


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.skipif(not DEBIAN_DIR.is_dir(), reason="apt-get install -y dataset-fashion-mnist")
def test_real_fashion_mnist(tmp_path):
    summary = ingest(open_source("mnist", SourceRequest((DEBIAN_DIR,))), tmp_path / "f.zarr")
    store = open_store(tmp_path / "f.zarr")
    assert (summary.rows_train, summary.rows_test, summary.n_features) == (60_000, 10_000, 784)
    assert summary.class_counts == {"train": [6000] * 10, "test": [1000] * 10}
    X, _ = store.read_chunk("test", 0)
    assert X.min() == 0 and X.max() == 1


def test_overwrite_replaces_the_store(tmp_path):
    datafiles.write_table(tmp_path / "t.csv", n_rows=100)
    ingest(csv_source(tmp_path / "t.csv"), tmp_path / "s.zarr", seed=1)
    with pytest.raises(InputError, match=r"s.zarr: already exists; pass --overwrite to replace it"):
        ingest(csv_source(tmp_path / "t.csv"), tmp_path / "s.zarr", seed=2)
    before = open_store(tmp_path / "s.zarr").checksum
    ingest(csv_source(tmp_path / "t.csv"), tmp_path / "s.zarr", seed=2, overwrite=True)
    assert open_store(tmp_path / "s.zarr").checksum != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr", "t.csv"]
    (tmp_path / "notes").mkdir()
    with pytest.raises(InputError, match=r"notes: exists and is not a Zarr store; refusing"):
        ingest(csv_source(tmp_path / "t.csv"), tmp_path / "notes", overwrite=True)


@pytest.mark.parametrize(("text", "options", "message"), [
    ("a,b,label\n1,2,0\n3,inf,1\n", {},
     r"t.csv: line 3, column 'b': expected a finite number, found inf"),
    ("a,b,label\n1,2,0\n3,4,1\n-1e39,6,1\n", {},
     r"t.csv: line 4, column 'a': expected a number within float32's range \(±3.4028235e\+38\) of the column's "
     r"mean -3.3333333e\+38, found -1e\+39"),
    ("a,b,label\n1,2,0.5\n3,4,1e39\n", {"task": "regression"},
     r"t.csv: line 3, column 'label': expected a number within float32's range .*found 1e\+39"),
    ("a,b,label\n1,2,0.5\n3,4,yes\n", {"task": "regression"},
     r"t.csv: line 3, column 'label': expected a number \(--task regression\), found 'yes'"),
    ("a,b,label\n" + "1,2,1\n" * 5, {},
     r"t.csv, column 'label': expected at least 2 classes, found 1 \(1: 5 rows\)"),
    ("a,b,label\n", {}, r"t.csv, target column 'label': no data rows"),
    ("a,b,label\n1,,0\n,2,1\n", {}, r"no data rows \(2 dropped: 1 for missing value in column 'a'; 1 for missing value in "),
    ("a,b,label\n1,2,0\n3,4,1\n", {"test_size": "2"}, r"--test-size: 2 gives 2 test rows of the 2 rows"),
    ("a,b,label\n1,2,0\n3,4,1\n", {"test_size": "1.5"}, r"--test-size: expected a row count ≥ 1 or a "
                                                        r"fraction in \(0, 1\), found '1.5'"),
    ("a,b,label\n1,2,0\n3,4,1\n", {"test_size": "ten"}, r"--test-size: expected a row count"),
    ("a,b,label\n1,2,0\n3,4,1\n", {"chunk_rows": 0}, r"--chunk-rows: expected a row count from 1 to 8,388,608 "),
    # audit (issue 27): sizes a header or an option claims are bounded before anything is allocated
    ("a,b,label\n1,2,0\n3,4,1\n", {"chunk_rows": 10**9},
     r"--chunk-rows: expected a row count from 1 to 8,388,608 \(chunks of 2 float32 features up to 64 MiB\), "
     r"found 1,000,000,000"),
])
def test_bad_input_fails_clearly_and_leaves_nothing(tmp_path, text, options, message):
    (tmp_path / "t.csv").write_text(text)
    source = csv_source(tmp_path / "t.csv", task=options.pop("task", "auto"))
    with pytest.raises(InputError, match=message):
        ingest(source, tmp_path / "s.zarr", **{"test_size": "1", **options})
    assert datafiles.listing(tmp_path) == {"t.csv"}


def test_bad_labels_and_nan_in_binary_inputs_leave_nothing(tmp_path):
    datafiles.write_mnist(tmp_path / "m", gz=False)
    labels = tmp_path / "m" / "t10k-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-1] + b"\x0c")
    with pytest.raises(InputError, match=r"t10k-labels-idx1-ubyte: item 19, column 'label': expected "
                                         r"a class label in 0..9, found 12"):
        ingest(open_source("mnist", SourceRequest((tmp_path / "m",))), tmp_path / "s.zarr")
    X = np.ones((10, 2))
    X[4, 1] = np.nan
    np.savez(tmp_path / "d.npz", X=X, y=np.arange(10) % 2)
    with pytest.raises(InputError, match=r"d.npz: row 4, column 'x1': expected a finite number, found nan"):
        ingest(open_source("npz", SourceRequest((tmp_path / "d.npz",))), tmp_path / "s.zarr")
    X[4, 1] = 1.0
    X[7, 0] = 1e39  # finite in float64, inf once cast to the store's float32 even less the column's mean 1e38
    np.savez(tmp_path / "d.npz", X=X, y=np.arange(10) % 2)
    with pytest.raises(InputError, match=r"d.npz: row 7, column 'x0': expected a number within float32's range"):
        ingest(open_source("npz", SourceRequest((tmp_path / "d.npz",))), tmp_path / "s.zarr")
    assert {p.name for p in tmp_path.iterdir()} == {"m", "d.npz"}


@pytest.mark.parametrize("n_features, expected", [(8, 10_000), (600, 436)])
def test_default_chunks_hold_at_most_a_mebibyte_of_rows(tmp_path, n_features, expected):
    """Without --chunk-rows, chunks hold 10,000 rows, fewer when that would exceed 1 MiB of float32."""
    npz = tmp_path / "wide.npz"
    rng = np.random.default_rng(0)
    np.savez(npz, X=rng.normal(size=(1200, n_features)), y=rng.integers(0, 2, 1200))
    ingest(open_source("npz", SourceRequest((npz,), None, "classification")), tmp_path / "s.zarr", test_size="0.1")
    store = open_store(tmp_path / "s.zarr")
    X, _ = store.arrays("train")
    assert store.attrs["chunk_rows"] == expected and X.chunks[0] == expected
    assert expected == 10_000 or expected * n_features * 4 <= 2**20 < (expected + 1) * n_features * 4
