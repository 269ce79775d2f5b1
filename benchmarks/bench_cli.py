"""How long users wait for the ``pep`` command line, measured with the command they run (the installed
``pep`` script, each run its own process), beside baselines measured in the same run.

- ``pep --help`` and ``pep --version``: the command list, which imports no command module; baseline: the
  full application, every command module imported (what ``pep --help`` did before), and a bare
  ``python -c pass`` (the interpreter's own start);
- ``pep ingest csv`` of a 600-row messy CSV (``;``, an id column, a text column, ``yes``/``no`` labels, a
  missing value) without a Prefect API: the flow's function called directly; baseline: the same command with
  ``--prefect``, which starts Prefect's temporary API server as every command did before.

Each figure is the median of ``--repeats`` runs (the first ``--prefect`` run, which creates Prefect's
database in a fresh ``PREFECT_HOME``, is not counted). The machine's load average is recorded: on a shared
machine absolute times move, the same-run ratios much less.

Usage: ``.venv/bin/python -m benchmarks.bench_cli [--repeats 7]`` (writes ``benchmarks/results/bench_cli.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import arguments, temporary_directory, write_results
from tests.datafiles import write_messy_csv

BIN = Path(sys.executable).parent
FULL_HELP = "import sys; sys.argv = ['pep', '--help']; from pep_gp.flows.cli import build_app; build_app()()"


def seconds(command: list[str], environment: dict[str, str]) -> float:
    """Wall time of one run of ``command`` (which must succeed)."""
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=environment, timeout=600)
    return time.perf_counter() - began


def median_seconds(command: list[str], environment: dict[str, str], repeats: int) -> dict:
    times = [seconds(command, environment) for _ in range(repeats)]
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "runs": repeats, "command": " ".join(command)}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_cli``."""
    return arguments(__doc__, repeats=7)


def main() -> None:
    args = cli().parse_args()
    load_before = os.getloadavg()
    with temporary_directory() as directory:
        home = directory / "prefect-home"
        environment = {**{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
                       "PREFECT_HOME": str(home), "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        csv = directory / "customers.csv"
        write_messy_csv(csv, n_rows=600)
        pep = str(BIN / "pep")
        ingest = [pep, "ingest", "csv", "--input", str(csv), "--target", "bought", "--sep", ";", "--id", "id",
                  "--na", "mean", "--out", str(directory / "s.zarr"), "--overwrite", "--quiet"]
        seconds(ingest + ["--prefect"], environment)  # creates Prefect's database: not counted
        results = {
            "python_start": median_seconds([sys.executable, "-c", "pass"], environment, args.repeats),
            "pep_help": median_seconds([pep, "--help"], environment, args.repeats),
            "pep_version": median_seconds([pep, "--version"], environment, args.repeats),
            "full_app_help_baseline": median_seconds([sys.executable, "-c", FULL_HELP], environment, args.repeats),
            "pep_ingest_600_rows": median_seconds(ingest, environment, args.repeats),
            "pep_ingest_600_rows_prefect_baseline": median_seconds(ingest + ["--prefect"], environment,
                                                                   max(3, args.repeats // 2)),
        }
    results["ratios"] = {
        "help_vs_full_app": round(results["full_app_help_baseline"]["median_s"] / results["pep_help"]["median_s"], 1),
        "ingest_vs_prefect": round(results["pep_ingest_600_rows_prefect_baseline"]["median_s"]
                                   / results["pep_ingest_600_rows"]["median_s"], 1)}
    write_results("bench_cli", {"load_average_before": load_before, "load_average_after": os.getloadavg(),
                                "note": "shared 2-core machine; medians of separate processes", **results})


if __name__ == "__main__":
    main()
