"""Where pep's stopping rule would stop the deep-GP fits of ``bench_dgp``, and how fast their energy still
rises at the last step: why the deep GPs train for a fixed number of steps by default (issue 28: with the
rule and Adam at 0.05, ``DeepGPRegressor`` stopped early and reached −2.38 on Boston where 1,000 steps at
0.01 reach −2.28).

``bench_dgp`` keeps every pep fit's energy trace as means over 25-step windows. For each deep-GP fit of a
results file this replays :class:`~pep_gp.pipeline.training.stopping.StoppingRule` (stop once the last
window's mean differs from the one before by less than ``tol`` nats per training row, a rise or a fall)
for several ``tol`` and window lengths (a window of ``k`` × 25 steps is the mean of ``k`` stored windows),
reports the step at which it would stop (the cap: never before it), how often a window's mean fell below
the one before, and the rise per row between the last two 100-step windows. Nothing is re-run; writes
``benchmarks/results/dgp_defaults.json``::

    .venv/bin/python -m benchmarks.dgp_defaults --results bench_dgp_fullbatch
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks._common import RESULTS, arguments, write_results
from benchmarks.bench_dgp import WINDOW

TOLERANCES = (1e-4, 1e-5, 1e-6)
WINDOWS = (1, 4, 8)  # in stored 25-step windows: 25, 100 and 200 steps


def stop_step(window_means: np.ndarray, rows: int, tol: float, windows: int, cap: int) -> int:
    """The step at which the rule with ``windows`` × 25-step windows would stop (``cap`` if never before)."""
    usable = len(window_means) // windows * windows
    means = window_means[:usable].reshape(-1, windows).mean(axis=1)
    for index in range(1, len(means)):
        if abs(means[index] - means[index - 1]) / rows < tol:  # a fall is unsettled, as StoppingRule has it
            return min(cap, (index + 1) * windows * WINDOW)
    return cap


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.dgp_defaults``."""
    parser = arguments(__doc__)
    parser.add_argument("--results", default="bench_dgp_fullbatch", help="results/NAME.json of a bench_dgp run")
    return parser


def main(argv=None) -> dict:
    args = cli().parse_args(argv)
    source = json.loads((RESULTS / f"{args.results}.json").read_text())
    cap = source["settings"]["steps"]
    rows_out = []
    for row in source["rows"]:
        if not row["model"].startswith("dgp"):
            continue
        rows = round(row["n"] * 0.9)
        traces = [np.asarray(split["energy_windows"]) for split in row["splits"]]
        out = {"dataset": row["dataset"], "M": row["M"], "model": row["model"], "fits": len(traces),
               "falls": int(sum(np.sum(np.diff(t) < 0) for t in traces)),
               "windows_compared": int(sum(len(t) - 1 for t in traces)), "stop_steps": {}}
        for windows in WINDOWS:
            for tol in TOLERANCES:
                steps = [stop_step(t, rows, tol, windows, cap) for t in traces]
                out["stop_steps"][f"window {windows * WINDOW}, tol {tol:g}"] = {
                    "median": float(np.median(steps)), "min": int(min(steps)), "stopped_early": int(sum(s < cap for s in steps))}
        last = [np.diff(t[len(t) - 8:].reshape(2, 4).mean(axis=1))[0] / rows for t in traces]  # two 100-step windows
        out["last_rise_per_row_per_100_steps"] = {"median": float(np.median(last)), "min": float(min(last)),
                                                  "max": float(max(last))}
        rows_out.append(out)
        print(json.dumps(out, indent=1), flush=True)
    results = {"settings": vars(args), "cap": cap, "rows": rows_out}
    write_results("dgp_defaults", results)
    return results


if __name__ == "__main__":
    main()
