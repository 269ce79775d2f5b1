"""``pep predict`` streams: the coordinator's peak memory on a 1,000,000-row store against a 100,000-row one,
both predicted on ``local:2`` (two Dask worker processes), and the distributed output against the
in-process one.

A ``sparse-gp-classifier`` run is trained on a 2,000-row messy table (a text column, ``yes``/``no`` labels);
stores of 100,000 and 1,000,000 rows of the same kind of table are ingested (generated here, in a temporary
directory; nothing is kept). Each prediction runs the ``pep predict`` command in its own process, which
reports its own peak resident memory (``VmHWM`` of ``/proc/self/status``: the coordinator only; the
workers are other processes), also as it was right after its imports. The 1,000,000-row predictions are made again in
process (``--cluster none``) and compared value for value.

Usage: ``.venv/bin/python -m benchmarks.bench_predict_memory`` (writes
``benchmarks/results/bench_predict_memory.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._common import Stopwatch, arguments, temporary_directory, write_results

SIZES = (100_000, 1_000_000)
# The child's peak is /proc's VmHWM (this program's own high-water mark): ru_maxrss would also count the
# parent's resident memory at the fork that started the child.
CHILD = textwrap.dedent("""
    import json, re, sys, time
    def peak_mb():
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) / 1024
    from pep_gp.flows.cli import main
    from pep_gp.flows import predict  # the command's module, imported before the memory is noted
    imported = peak_mb()
    sys.argv = ["pep", "predict", *json.loads(sys.argv[1])]
    began = time.perf_counter()
    try:
        main()
    except SystemExit as exit:
        assert not exit.code, exit.code
    print(json.dumps({"seconds": time.perf_counter() - began, "imports_rss_mb": imported, "peak_rss_mb": peak_mb()}),
          file=sys.stderr)
""")


def messy_table(n_rows: int, seed: int) -> pd.DataFrame:
    """The benchmark's table: ``id``, ``age`` (one value missing), ``city`` (text), ``income``, ``bought``."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, n_rows).astype(float)
    city = np.array(["Paris", "Lyon", "Nice"])[rng.integers(0, 3, n_rows)]
    income = rng.normal(50, 10, n_rows).round(2)
    score = (age - 45) / 15 + (city == "Paris") - (income - 50) / 10 + rng.normal(0, 0.5, n_rows)
    age[3] = np.nan
    return pd.DataFrame({"id": [f"c{i:07d}" for i in range(n_rows)], "age": age, "city": city, "income": income,
                         "bought": np.where(score > 0, "yes", "no")})


def ingest_table(table: pd.DataFrame, directory: Path, name: str) -> Path:
    from pep_gp.pipeline.data.ingest import ingest
    from pep_gp.pipeline.data.sources import SourceRequest, open_source

    csv, store = directory / f"{name}.csv", directory / f"{name}.zarr"
    table.to_csv(csv, sep=";", index=False)
    ingest(open_source("csv", SourceRequest((csv,), "bought", sep=";", ids=("id",), na="mean")), store)
    csv.unlink()
    return store


def predict_in_child(arguments: list[str]) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(arguments)], capture_output=True, text=True,
                          env=environment, timeout=3600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stderr.strip().splitlines()[-1])


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_predict_memory`` (no options)."""
    return arguments(__doc__)


def main() -> None:
    cli().parse_args()
    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.runs.config import TrainConfig
    from pep_gp.pipeline.training.trainer import TrainJob, train

    load_before = os.getloadavg()
    with temporary_directory() as directory:
        train_store = ingest_table(messy_table(2_000, seed=0), directory, "train")
        run_dir = directory / "run"
        train(TrainJob("sparse-gp-classifier", open_store(train_store),
                       TrainConfig(model={"num_inducing": 50}, epochs=2, batch_size=500), run_dir))
        runs = {}
        for n_rows in SIZES:
            with Stopwatch() as timer:
                store = ingest_table(messy_table(n_rows, seed=n_rows), directory, f"rows-{n_rows}")
            ingest_seconds = timer.seconds
            out = directory / f"rows-{n_rows}.parquet"
            report = predict_in_child(["--run-dir", str(run_dir), "--input", str(store), "--out", str(out),
                                       "--cluster", "local:2", "--quiet"])
            runs[str(n_rows)] = {**{k: round(v, 1) for k, v in report.items()},
                                 "ingest_seconds": round(ingest_seconds, 1),
                                 "rows_per_second": round(n_rows / report["seconds"])}
        largest = directory / f"rows-{SIZES[-1]}"
        in_process = predict_in_child(["--run-dir", str(run_dir), "--input", str(largest.with_suffix(".zarr")),
                                       "--out", str(directory / "in-process.parquet"), "--quiet"])
        distributed, local = (pd.read_parquet(path) for path in (largest.with_suffix(".parquet"),
                                                                 directory / "in-process.parquet"))
        equal = bool(distributed.equals(local)) and len(distributed) == SIZES[-1]
    small, large = (runs[str(n)]["peak_rss_mb"] for n in SIZES)
    write_results("bench_predict_memory", {
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "note": "shared 2-core machine; peak RSS (VmHWM, MiB) of the coordinator process only",
        "timed_command": "pep predict --run-dir RUN --input STORE --out OUT.parquet --cluster local:2",
        "model": "sparse-gp-classifier, M = 50, trained on 2,000 rows", "runs": runs,
        "peak_rss_ratio_1m_vs_100k": round(large / small, 3),
        "within_10_percent": abs(large / small - 1) <= 0.10,
        "in_process_seconds_1m": round(in_process["seconds"], 1),
        "distributed_output_equals_in_process": equal})


if __name__ == "__main__":
    main()
