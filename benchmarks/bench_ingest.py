"""Ingest benchmark: pep's streaming ingest of a large CSV beside a plain pandas + zarr load of it.

Generates a CSV of ``--rows`` rows (default 2,000,000; 8 numeric features and a 3-class label, like the
airline data) in a temporary directory, then, each in its own subprocess so that its peak memory is its
own, runs:

- ``pep_library``: :func:`pep_gp.pipeline.data.ingest.ingest` (streaming, Dask chunk writes, no Prefect);
- ``pep_cli``: the ``pep ingest csv … --json`` command (without a Prefect API: the flow's function, no server);
- ``pandas_zarr``: ``pandas.read_csv`` of the whole file, then one ``zarr`` array write.

Each child reports its own peak resident memory (``ru_maxrss``), also as it was right after its imports
(so the growth during the work shows apart from what importing the stack costs), and the seconds of
its work; rows/s and MB/s are over the CSV's size. Writes ``benchmarks/results/ingest.json`` and prints it.

Usage: ``.venv/bin/python benchmarks/bench_ingest.py [--rows N]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from benchmarks._common import arguments, temporary_directory, write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ingest.json"
MEMORY_LIMIT_MB = 500

# Each child imports what it needs, notes its peak RSS then (``imported``), does the work and prints
# one JSON line on stderr: work seconds, peak RSS after imports and at the end (ru_maxrss, MiB).
PROLOGUE = ("import json, resource, sys, time\n"
            "def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n")
REPORT = ("print(json.dumps({'seconds': seconds, 'imports_rss_mb': imported, 'peak_rss_mb': rss()}), "
          "file=sys.stderr)")
CHILDREN = {
    "pep_library": """
        from pep_gp.pipeline.data.ingest import ingest
        from pep_gp.pipeline.data.sources import SourceRequest, open_source
        imported = rss()
        began = time.perf_counter()
        ingest(open_source("csv", SourceRequest((CSV,), "label")), OUT + "/pep.zarr")
        seconds = time.perf_counter() - began
    """,
    "pep_cli": """
        from pep_gp.flows.cli import main
        imported = rss()
        sys.argv = ["pep", "ingest", "csv", "--input", CSV, "--target", "label",
                    "--out", OUT + "/cli.zarr", "--json"]
        began = time.perf_counter()
        try:
            main()
        except SystemExit as exit:
            assert not exit.code, exit.code
        seconds = time.perf_counter() - began
    """,
    "pandas_zarr": """
        import pandas as pd, zarr
        imported = rss()
        began = time.perf_counter()
        frame = pd.read_csv(CSV)
        X = frame.drop(columns="label").to_numpy("float32")
        zarr.create_array(OUT + "/plain.zarr", shape=X.shape, chunks=(10_000, X.shape[1]),
                          dtype="float32")[:] = X
        seconds = time.perf_counter() - began
    """,
}


def write_csv(path: Path, n_rows: int, block: int = 250_000) -> None:
    """A CSV of ``n_rows`` rows: features f0..f7 (4 decimals) and a label 0..2, written in blocks."""
    rng = np.random.default_rng(0)
    with path.open("w") as handle:
        handle.write(",".join([*(f"f{j}" for j in range(8)), "label"]) + "\n")
        for start in range(0, n_rows, block):
            n = min(block, n_rows - start)
            X = rng.normal(size=(n, 8)) * [5, 500, 60, 300, 300, 2, 8, 3] + [10, 1000, 150, 800,
                                                                              900, 4, 15, 6]
            rows = np.column_stack([X, rng.integers(0, 3, n)])
            np.savetxt(handle, rows, fmt=["%.4f"] * 8 + ["%d"], delimiter=",")


def run_child(name: str, csv: Path, out: Path) -> dict[str, float]:
    """Run one measured child; return its work seconds, RSS after imports and peak, wall seconds."""
    code = (PROLOGUE + f"CSV, OUT = {str(csv)!r}, {str(out)!r}\n" + textwrap.dedent(CHILDREN[name])
            + REPORT)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "DO_NOT_TRACK": "1",
                               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return {**report, "wall_seconds": time.perf_counter() - began}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_ingest``."""
    parser = arguments(__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    return parser


def main() -> None:
    """Generate the CSV, run the three children, write and print the JSON results."""
    rows = cli().parse_args().rows
    with temporary_directory(prefix="pep-bench-") as tmp:
        csv = tmp / "big.csv"
        write_csv(csv, rows)
        size_mb = csv.stat().st_size / 2**20
        results = {}
        for name in CHILDREN:
            measured = run_child(name, csv, tmp)
            results[name] = {
                "seconds": round(measured["seconds"], 2),
                "wall_seconds_with_startup": round(measured["wall_seconds"], 2),
                "rows_per_s": round(rows / measured["seconds"]),
                "mb_per_s": round(size_mb / measured["seconds"], 1),
                "peak_rss_mb": round(measured["peak_rss_mb"], 1),
                "rss_after_imports_mb": round(measured["imports_rss_mb"], 1),
                "rss_growth_during_work_mb": round(measured["peak_rss_mb"]
                                                   - measured["imports_rss_mb"], 1),
            }
    report = {
        "benchmark": "ingest",
        "rows": rows,
        "csv_mb": round(size_mb, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "results": results,
        "memory_limit_mb": MEMORY_LIMIT_MB,
        "pep_peak_under_limit": results["pep_library"]["peak_rss_mb"] < MEMORY_LIMIT_MB
        and results["pep_cli"]["peak_rss_mb"] < MEMORY_LIMIT_MB,
    }
    write_json(RESULTS, report, echo=True)


if __name__ == "__main__":
    main()
