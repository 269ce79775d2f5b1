"""Users' own tables at ingest: text and categorical columns, labels of any values, missing-value policies,
column choices, the stored ``transforms`` record, and every bad-input message (naming file, row, column)."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from pep_gp.pipeline.data.frames import TableChunk
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources import base
from pep_gp.pipeline.data.sources.base import BLOCK_ROWS
from pep_gp.pipeline.data.sources.tables import csv_chunks
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.data.transforms import Transforms, read_transforms
from pep_gp.pipeline.errors import InputError
from tests import datafiles


def store_rows(store) -> np.ndarray:
    """Every row of a store (train then test) as one (n, D + 1) float64 array, sorted."""
    rows = np.concatenate([np.column_stack([X[:], y[:]]) for X, y in map(store.arrays, ("train", "test"))])
    return rows[np.lexsort(rows.T[::-1])].astype(np.float64)


def fitted(tmp_path, text: str, name: str = "t.csv", **request):
    path = tmp_path / name
    path.write_text(text)
    return open_source("csv", SourceRequest((path,), request.pop("target", "label"), **request)).fitted()


def test_a_messy_csv_becomes_one_hot_rows_and_its_record_reproduces_them(tmp_path):
    """The oracle: the same table transformed independently with pandas (mean fill, one-hot dummies, a column
    float32 cannot hold exactly less its mean)."""
    path = tmp_path / "customers.csv"
    datafiles.write_messy_csv(path, n_rows=300)
    ingest(open_source("csv", SourceRequest((path,), "bought", sep=";", ids=("id",), na="mean")),
           tmp_path / "s.zarr", seed=1)
    store = open_store(tmp_path / "s.zarr")
    table = pd.read_csv(path, sep=";")
    assert table["age"].isna().sum() == 1
    record = store.attrs["transforms"]
    assert store.feature_names == ("age", "city=Lyon", "city=Nice", "city=Paris", "income")
    assert (record["labels"], record["na"], record["id_columns"], record["target"], record["task"]) == (
        ["no", "yes"], "mean", ["id"], "bought", "classification")
    assert record["features"][0] == {"kind": "numeric", "column": "age", "fill": table["age"].mean(), "offset": 0.0}
    assert [f["fill"] for f in record["features"][1:4]] == pytest.approx(
        table["city"].value_counts(normalize=True).sort_index().tolist(), abs=1e-15)
    expected = np.column_stack([table["age"].fillna(table["age"].mean()),
                                pd.get_dummies(table["city"]).sort_index(axis=1).to_numpy(float),
                                table["income"] - table["income"].mean(),
                                table["bought"] == "yes"]).astype(np.float32).astype(np.float64)
    assert record["features"][4]["offset"] == pytest.approx(table["income"].mean(), rel=1e-15)
    np.testing.assert_array_equal(store_rows(store), expected[np.lexsort(expected.T[::-1])])
    assert store.transforms == read_transforms(json.loads(json.dumps(record)), "copy")


@pytest.mark.parametrize(("values", "task", "labels"), [
    (["yes", "no", "no", "yes"], "auto", ["no", "yes"]),
    (["-1", "1", "1", "-1"], "auto", [-1, 1]),
    (["3", "1", "2", "1"], "auto", [1, 2, 3]),
    (["True", "False", "True", "False"], "auto", [False, True]),
    (["0.5", "1.5", "0.5", "1.5"], "classification", [0.5, 1.5]),
])
def test_labels_of_any_values_map_to_0_to_C_minus_1_in_sorted_order(tmp_path, values, task, labels):
    text = "a,label\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values * 3))
    source = fitted(tmp_path, text, task=task)
    assert list(source.transforms.labels) == labels and source.n_classes == len(labels)
    assert [type(v) for v in source.transforms.labels] == [type(v) for v in labels]
    X, y = np.concatenate([b.X for b in source.read()]), np.concatenate([b.y for b in source.read()])
    decoded = source.transforms.decode_labels(y.astype(int))
    assert [str(v) for v in decoded[np.argsort(X[:, 0])]] == [str(v) for v in pd.Series(values * 3).map(
        lambda v: {str(label): label for label in labels}.get(v, v))]


def test_a_target_parsed_as_numbers_in_one_block_and_text_in_another_is_read_again_as_text(tmp_path):
    """pandas parses each block alone: the first block's labels 1/2 are numbers, a later block's text."""
    n = BLOCK_ROWS + 10
    labels = ["1" if i % 2 else "2" for i in range(BLOCK_ROWS)] + ["yes"] * 10
    (tmp_path / "t.csv").write_text("a,label\n" + "".join(f"{i},{v}\n" for i, v in enumerate(labels)))
    source = open_source("csv", SourceRequest((tmp_path / "t.csv",), "label")).fitted()
    assert source.transforms.labels == ("1", "2", "yes")
    y = np.concatenate([b.y for b in source.read()])
    assert len(y) == n and np.bincount(y.astype(int)).tolist() == [BLOCK_ROWS // 2, BLOCK_ROWS // 2, 10]


def test_text_numbers_and_categorical_columns(tmp_path):
    text = "code,zip,flag,label\n" + "".join(f"{c},{z},{f},{k}\n" for c, z, f, k in [
        ("A1", 75001, True, 0), ("B2", 69001, False, 1), ("7", 75001, True, 0), ("A1", 13001, False, 1)])
    source = fitted(tmp_path, text, categorical=("zip",))
    assert source.feature_names == ("code=7", "code=A1", "code=B2", "zip=13001", "zip=69001", "zip=75001", "flag")
    X = np.concatenate([b.X for b in source.read()])
    np.testing.assert_array_equal(X, [[0, 1, 0, 0, 0, 1, 1], [0, 0, 1, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1, 1],
                                      [0, 1, 0, 1, 0, 0, 0]])


def test_features_drop_and_id_choose_the_columns_in_order(tmp_path):
    text = "id,a,b,c,label\nx,1,2,3,0\ny,4,5,6,1\n"
    assert fitted(tmp_path, text, ids=("id",)).feature_names == ("a", "b", "c")
    assert fitted(tmp_path, text, ids=("id",), drop=("b",)).feature_names == ("a", "c")
    assert fitted(tmp_path, text, features=("c", "a")).feature_names == ("c", "a")
    assert fitted(tmp_path, text, features=("c", "a")).transforms.id_columns == ()


def test_na_policies(tmp_path):
    text = "a,b,label\n1,2,0\n,4,1\n5,,1\n7,8,\n9,10,1\n"
    drop = fitted(tmp_path, text)
    blocks = list(drop.read())
    assert np.concatenate([b.X for b in blocks]).tolist() == [[1, 2], [9, 10]]
    assert blocks[0].dropped == {"missing value in column 'a'": 1, "missing value in column 'b'": 1,
                                 "missing value in column 'label'": 1}
    mean = fitted(tmp_path, text, na="mean")
    assert [f.fill for f in mean.transforms.features] == [(1 + 5 + 9) / 3, (2 + 4 + 10) / 3]  # rows with a label
    assert np.concatenate([b.X for b in mean.read()]).tolist() == [[1, 2], [5, 4], [5, 16 / 3], [9, 10]]
    with pytest.raises(InputError, match=r"t.csv: line 3, column 'a': missing value \(--na fail\)"):
        fitted(tmp_path, text, na="fail")


def test_npz_labels_of_text_and_booleans_and_parquet_text_columns(tmp_path):
    X = np.arange(12.0).reshape(6, 2)
    np.savez(tmp_path / "t.npz", X=X, y=np.array(["cat", "dog", "cat", "dog", "cat", "emu"]))
    source = open_source("npz", SourceRequest((tmp_path / "t.npz",), drop=("x0",))).fitted()
    assert source.transforms.labels == ("cat", "dog", "emu") and source.feature_names == ("x1",)
    np.savez(tmp_path / "t.npz", X=X, y=np.array([True, False] * 3))
    assert open_source("npz", SourceRequest((tmp_path / "t.npz",))).fitted().transforms.labels == (False, True)
    pq.write_table(pa.table({"city": ["Nice", None, "Lyon", "Nice"], "n": [1, 2, 3, 1],
                             "y": [0.5, 1.0, 2.0, 3.5]}), tmp_path / "t.parquet")
    source = open_source("parquet", SourceRequest((tmp_path / "t.parquet",), "y", categorical=("n",))).fitted()
    assert source.feature_names == ("city=Lyon", "city=Nice", "n=1", "n=3") and source.task == "regression"
    assert np.concatenate([b.X for b in source.read()]).tolist() == [[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0]]


def test_stores_of_other_sources_have_the_identity_record(tmp_path):
    ingest(open_source("sklearn:wine"), tmp_path / "w.zarr")
    store = open_store(tmp_path / "w.zarr")
    assert "transforms" not in store.attrs
    assert store.transforms.feature_names == store.feature_names and store.transforms.labels == (0, 1, 2)


def test_a_damaged_record_is_refused_when_the_store_opens(tmp_path):
    (tmp_path / "t.csv").write_text("a,label\n1,no\n2,yes\n3,no\n4,yes\n5,no\n")
    ingest(open_source("csv", SourceRequest((tmp_path / "t.csv",), "label")), tmp_path / "s.zarr", test_size="1")
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="r+")
    group.attrs["transforms"] = {**group.attrs["transforms"], "labels": ["no", 1]}
    with pytest.raises(InputError, match=r"s.zarr: attribute 'transforms' is not a valid version-1 record "
                                         r"\(.*labels: expected at least 2 distinct values of one type, found \['no', 1\]"):
        open_store(tmp_path / "s.zarr")
    group.attrs["transforms"] = {**group.attrs["transforms"], "labels": ["no", "yes"], "version": 2}
    with pytest.raises(InputError, match=r"version: Input should be 1"):
        open_store(tmp_path / "s.zarr")


def test_apply_on_new_rows_unseen_values_missing_values_and_bad_numbers():
    record = Transforms.model_validate({
        "features": [{"kind": "numeric", "column": "age"}, {"kind": "one_hot", "column": "city", "value": "Lyon"},
                     {"kind": "one_hot", "column": "city", "value": "Paris"}],
        "labels": ["no", "yes"], "na": "drop", "target": "bought", "task": "classification"})
    frame = pd.DataFrame({"age": [30.0, 40.0], "city": ["Paris", "Rome"]})
    unseen = {}
    x = record.apply(TableChunk(frame, frame.isna(), "new.csv", np.array([2, 3]), "line"), unseen)
    np.testing.assert_array_equal(x, [[30, 0, 1], [40, 0, 0]])
    assert unseen == {"city": {"Rome": 1}}
    frame = pd.DataFrame({"age": [30.0, np.nan], "city": ["Paris", "Lyon"]})
    with pytest.raises(InputError, match=r"new.csv: line 3, column 'age': missing value \(--na drop; fill it in, "
                                         r"or pass --na mean \(the training mean\) or --na drop to pep predict\)"):
        record.apply(TableChunk(frame, frame.isna(), "new.csv", np.array([2, 3]), "line"))
    # issue 37, item 8: pep predict --na fills in the training means (x_mean: a one-hot value's frequency)
    frame = pd.DataFrame({"age": [np.nan, 40.0, 50.0], "city": ["Paris", None, "Lyon"]})
    chunk = TableChunk(frame, frame.isna(), "new.csv", np.array([2, 3, 4]), "line")
    filled = record.for_new_rows("mean", np.array([35.0, 0.25, 0.75])).apply(chunk)
    np.testing.assert_array_equal(filled, [[35, 0, 1], [40, 0.25, 0.75], [50, 1, 0]])
    np.testing.assert_array_equal(record.complete(chunk), [False, False, True])
    assert record.for_new_rows("drop", np.zeros(3)).apply(chunk.subset(record.complete(chunk))).tolist() == [[50, 1, 0]]
    with pytest.raises(InputError, match=r"line 2, column 'age': missing value \(--na fail"):
        record.for_new_rows("fail", np.zeros(3)).apply(chunk)
    with pytest.raises(InputError, match=r"--na: expected one of drop, fail, mean, found 'zero'"):
        record.for_new_rows("zero", np.zeros(3))
    frame = pd.DataFrame({"age": ["30", "forty"], "city": ["Paris", "Lyon"]})
    with pytest.raises(InputError, match=r"new.csv: line 3, column 'age': expected a number, found 'forty'"):
        record.apply(TableChunk(frame, frame.isna(), "new.csv", np.array([2, 3]), "line"))
    assert record.decode_labels(np.array([1, 0, 1])).tolist() == ["yes", "no", "yes"]


@pytest.mark.parametrize(("text", "request_options", "message"), [
    ("a,b,label\n1,2,0\n3,x,1\n4,5,1\n", {},
     r"t.csv: line 3, column 'b': expected a number, found 'x' \(the column's other values are numbers; "
     r"pass --categorical b to one-hot encode it\)"),
    ("a,name,label\n" + "".join(f"{i},n{i},{i % 2}\n" for i in range(60)), {},
     r"t.csv, column 'name': 60 distinct text values, more than --max-categories 50; leave it out with "
     r"--drop name or raise --max-categories"),
    ("a,label\n" + "".join(f"{i},{i}\n" for i in range(150)), {},
     r"t.csv, column 'label': 150 distinct labels, more than 100 for --task auto; pass --task regression "
     r"for a numeric target, or --task classification"),
    ("a,label\n1,yes\n2,yes\n", {}, r"t.csv, column 'label': expected at least 2 classes, found 1 \('yes': 2 rows\)"),
    ("a,b,label\n1,,0\n2,,1\n", {"na": "mean"}, r"t.csv, column 'b': every value is missing; leave it out with --drop b"),
    ("a,label\n1,0\n", {"target": "lable"},
     r"t.csv: no column 'lable' \(the --target column\); columns are a, label \(did you mean 'label'\?\)"),
    ("a,b,label\n1,2,0\n", {"drop": ("c",)}, r"t.csv: no column 'c' \(the --drop column\); columns are a, b, label"),
    ("a,b,label\n1,2,0\n", {"features": ("a", "label")}, r"--features: 'label' is the --target column"),
    ("id,a,label\n1,2,0\n", {"ids": ("id",), "features": ("id", "a")}, r"--features: 'id' is an --id column"),
    ("a,b,label\n1,2,0\n", {"categorical": ("label",)}, r"--categorical: 'label' is not a feature column"),
    ("a;b;label\n1;2;0\n", {}, r"t.csv: read as a single column 'a;b;label' with --sep ','; the header holds ';': "
                               r"pass --sep ';'"),
    ("a,label\n1,0\n", {"task": "clasification"}, r"--task: expected one of auto, classification, regression, "
                                                  r"found 'clasification' \(did you mean 'classification'\?\)"),
    ("a,label\n1,0\n", {"na": "zero"}, r"--na: expected one of drop, fail, mean, found 'zero'"),
    ("a,b,a,label\n1,2,3,0\n", {}, r"t.csv: column name 'a' repeated in the header; each column needs its own name"),
    ("a,b,label\n1,2,0\n", {"features": ("a", "a")}, r"--features: 'a' given twice; name each column once"),
    (",".join(f"c{j}" for j in range(100_001)) + ",label\n", {}, r"t.csv: 100,002 columns, more than the 100,000"),
    # issue 37, item 8: a truncated last row was read with its missing fields as missing values
    ("a,b,label\n1,2,0\n3,4,1\n5,6", {"na": "mean"},
     r"t.csv: line 4 has 2 fields, expected 3 as in the header \(a truncated row\?\)$"),
    # issue 37, item 8: lines were counted as records, one too few after a field holding a newline
    ('note,b,label\n"two\nlines",2,0\nn,x,1\nm,5,1\n', {"categorical": ("note",)},
     r"t.csv: line 4, column 'b': expected a number, found 'x'"),
    ("a,b,label\n1,2,0\n\n3,x,1\n4,5,1\n", {}, r"t.csv: line 4, column 'b': expected a number, found 'x'"),
])
def test_bad_tables_name_the_file_row_and_column(tmp_path, text, request_options, message):
    with pytest.raises(InputError, match=message):
        fitted(tmp_path, text, **request_options)


def test_options_other_sources_do_not_take(tmp_path):
    with pytest.raises(InputError, match="--id: source 'sklearn:wine' does not take this option"):
        open_source("sklearn:wine", SourceRequest(ids=("x",)))
    with pytest.raises(InputError, match="--sep: source 'parquet' does not take this option"):
        pq.write_table(pa.table({"a": [1.0], "y": [1.0]}), tmp_path / "t.parquet")
        open_source("parquet", SourceRequest((tmp_path / "t.parquet",), "y", sep=";"))
    with pytest.raises(InputError, match=r"SOURCE: unknown source 'cvs'; .*\(did you mean 'csv'\?\)"):
        open_source("cvs")


def test_parquet_nested_or_repeated_columns_are_named(tmp_path):
    """Issue 37: a nested Parquet column gave a traceback; a repeated name read either column."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0], "s": [{"x": 1}, {"x": 2}], "label": [0, 1]}), path)
    with pytest.raises(InputError, match=r"t.parquet: column 's' is nested \(struct<x: int64>\); .* --drop s"):
        open_source("parquet", SourceRequest((path,), "label")).fitted()
    assert open_source("parquet", SourceRequest((path,), "label", drop=("s",))).fitted().feature_names == ("a",)
    pq.write_table(pa.Table.from_arrays([pa.array([1.0]), pa.array([2.0]), pa.array([0])], names=["a", "a", "label"]), path)
    with pytest.raises(InputError, match=r"t.parquet: column name 'a' repeated in the header"):
        open_source("parquet", SourceRequest((path,), "label"))


def test_the_csv_reader_of_ingest_and_predict_numbers_physical_lines_and_refuses_a_short_last_row(tmp_path):
    """Issue 37, item 8: ``pep predict --input x.csv`` reads with :func:`csv_chunks` as ingest does."""
    path = tmp_path / "new.csv"
    path.write_text('id,note\r\n1,"a\r\nb"\r\n\r\n2,c\r\n3,"d\ne\nf"\r\n4,g\r\n')
    chunks = list(csv_chunks([path], ["note"], frozenset(["note"]), ","))
    assert chunks[0].rows.tolist() == [2, 5, 6, 9] and chunks[0].frame["note"].tolist() == ["a\r\nb", "c",
                                                                                            "d\ne\nf", "g"]
    path.write_text("id,note\n1,a\n2")
    with pytest.raises(InputError, match=r"new.csv: line 3 has 1 field, expected 2 as in the header"):
        list(csv_chunks([path], ["note"], frozenset(["note"]), ","))


def test_a_line_longer_than_the_limit_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    """Issue 62, item 6: one 1 GB field took ``pep ingest`` to 6.6 GB of memory before pandas ran out of it. A
    line is read at most :data:`MAX_LINE_CHARS` characters at a time (lowered here to 1 MB for a 30 MB field):
    refused at once, in one line naming the file, the line and the limit, with the memory of one limit."""
    monkeypatch.setattr(base, "MAX_LINE_CHARS", 1_000_000)
    path = tmp_path / "t.csv"
    with path.open("w") as table:
        table.write("a,b,label\n1,2,0\n3,")
        for _ in range(30):
            table.write("9" * 1_000_000)
        table.write(",1\n5,6,1\n")
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"^\S*t.csv: line 3 is longer than 1,000,000 characters, the most pep "
                                             r"reads in one line"):
            open_source("csv", SourceRequest((path,), "label")).fitted()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, f"{peak:,} bytes traced to refuse a 30 MB line against a 1 MB limit"
    # quoted fields spanning short lines (each under the csv module's field limit) are bounded as one record
    path.write_text(",".join(f"c{j}" for j in range(12)) + ",label\n" + ",".join(['"' + "x\n" * 50_000 + '"'] * 12)
                    + ",0\n")
    with pytest.raises(InputError, match=r"t.csv: line 2: a record longer than 1,000,000 characters"):
        list(csv_chunks([path], ["c0"], frozenset(["c0"]), ","))


def test_a_header_with_an_empty_name_is_refused_naming_its_position(tmp_path):
    """Issue 62, item 9c: an empty header name became pandas' ``Unnamed: 1``, a column nobody named."""
    with pytest.raises(InputError, match=r"t.csv: column 2 of the header has no name; name it in the header"):
        fitted(tmp_path, "a,,label\n1,2,0\n2,3,1\n")
    with pytest.raises(InputError, match=r"t.csv: column 4 of the header has no name"):
        fitted(tmp_path, "a,b,label, \n1,2,0,\n2,3,1,\n")
    pq.write_table(pa.table({"a": [1.0, 2.0], "": [3.0, 4.0], "label": [0, 1]}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"t.parquet: column 2 of the header has no name"):
        open_source("parquet", SourceRequest((tmp_path / "t.parquet",), "label"))


@pytest.mark.parametrize(("text", "message"), [
    ("a,b,label\n1.5,2,0\n3.5\x00,4,1\n", r"t.csv: line 3, column 'a': a NUL byte in '3.5\\x00'"),
    ('a,b,label\n1.5,"x",0\n2.5,"y\x00",1\n', r"t.csv: line 3, column 'b': a NUL byte in 'y\\x00'"),
    ("a,b\x00,label\n1,2,0\n", r"t.csv: line 1, column 2: a NUL byte in 'b\\x00'"),
])
def test_nul_bytes_are_refused_naming_the_line_and_column(tmp_path, text, message):
    """Issue 62, item 9d: ``3.5\\x00`` was text to pandas, so a column of numbers became one-hot categories."""
    with pytest.raises(InputError, match=message + r"; the file is damaged or not UTF-8 text"):
        fitted(tmp_path, text + "".join(f"{i}.5,{i},{i % 2}\n" for i in range(40)))


def test_a_missing_value_is_named_at_its_first_row_whatever_its_column():
    """Issue 62, item 9a: ``pep predict`` named line 865 for a missing cell on line 16: the first missing value
    of the first column that had one, not of the first row."""
    record = Transforms.model_validate({
        "features": [{"kind": "numeric", "column": "a"}, {"kind": "numeric", "column": "b"}],
        "labels": None, "na": "drop", "target": "y", "task": "regression"})
    frame = pd.DataFrame({"a": [1.0, 2.0, np.nan], "b": [3.0, np.nan, 4.0]})
    with pytest.raises(InputError, match=r"new.csv: line 16, column 'b': missing value"):
        record.apply(TableChunk(frame, frame.isna(), "new.csv", np.array([2, 16, 865]), "line"))
