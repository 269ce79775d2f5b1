"""What a small scikit-learn grid search costs a user, with pep's size buckets on and off (issue 24).

A 2 × 2 ``GridSearchCV`` with 3 folds on 120 rows of a binary problem (``SparseGPClassifier`` at its
defaults, the grid over ``learning_rate`` and ``tol``: 12 fits and a refit), each setting in its own fresh
Python process with JAX's persistent compilation cache off (``PEP_COMPILATION_CACHE=off``), so each run
pays its compilations as a user's first search does. With buckets on (the default) every fold's and the
refit's rows are padded to a few sizes (:mod:`pep_gp.pipeline.data.sizes`) and the training rows ``N``
are an argument of the compiled step, so fits of different row counts share programs; ``PEP_SIZE_BUCKETS=off``
is the baseline. Runs alternate (on, off, on, off, …); medians are reported with the number of XLA
compilations each run made, and the load average (the machine may be shared).

Usage: ``.venv/bin/python -m benchmarks.bench_gridsearch [--repeats 3]`` (writes
``benchmarks/results/bench_gridsearch.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks._common import arguments, write_results

SEARCH = r"""
import json, time
import jax
import numpy as np
from sklearn.model_selection import GridSearchCV
from pep_gp import SparseGPClassifier

compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: compiles.append(duration) if event == "/jax/core/compile/backend_compile_duration" else None)
rng = np.random.default_rng(0)
X = rng.normal(size=(120, 3))
y = (X[:, 0] + 0.5 * np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=120) > 0).astype(int)
began = time.perf_counter()
search = GridSearchCV(SparseGPClassifier(), {"learning_rate": [0.05, 0.1], "tol": [1e-4, 1e-3]}, cv=3,
                      scoring="neg_log_loss").fit(X, y)
print(json.dumps({"seconds": time.perf_counter() - began, "compilations": len(compiles),
                  "compile_seconds": sum(compiles), "best_params": search.best_params_,
                  "best_score": search.best_score_}))
"""


def run(buckets: str) -> dict:
    environment = {**os.environ, "PEP_SIZE_BUCKETS": buckets, "PEP_COMPILATION_CACHE": "off"}
    out = subprocess.run([sys.executable, "-c", SEARCH], check=True, capture_output=True, text=True,
                         env=environment, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_gridsearch``."""
    return arguments(__doc__, repeats=3)


def main() -> None:
    args = cli().parse_args()
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for _ in range(args.repeats):
        for setting in ("on", "off"):
            runs[setting].append(run(setting))
    summary = {setting: {"median_s": round(statistics.median(r["seconds"] for r in results), 2),
                         "compilations": [r["compilations"] for r in results],
                         "compile_s_median": round(statistics.median(r["compile_seconds"] for r in results), 2),
                         "best_params": results[0]["best_params"], "best_score": results[0]["best_score"]}
               for setting, results in runs.items()}
    write_results("bench_gridsearch", {
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "search": "GridSearchCV(SparseGPClassifier(), learning_rate x tol (2 x 2), cv=3), 120 rows, 3 features",
        "buckets_on": summary["on"], "buckets_off_baseline": summary["off"],
        "speedup": round(summary["off"]["median_s"] / summary["on"]["median_s"], 2)})


if __name__ == "__main__":
    main()
