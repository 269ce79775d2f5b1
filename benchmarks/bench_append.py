"""Growing data (issue 42): train on the first half of the bundled airline flights, append the second half
with ``pep ingest … --append``, continue with ``pep train --resume``; compare the held-out NLL with a run
trained on all rows from the start for the same number of steps.

Usage::

    .venv/bin/python -m benchmarks.bench_append [--steps 150] [--batch-size 4000] [--num-inducing 50]

The bundled 2013 NYC flights (``pep ingest airline --target delayed``: 273,853 flights, 8 features, 2
classes) in file order, which is date order: the first half is January to about July, the second the rest
of the year, so the appended rows are of months the first run never saw. The store of the first half takes
10,000 test rows (the airline default), and the append gives the same fraction of the second half's rows to
the test split; every run's NLL is on the grown store's whole test split, rows no run trained on
(``before_append``: the first store's test split, before the append).
Runs (``sparse-gp-classifier``, constant learning rate 0.05, ``tol = 0``):

* ``grown``: ``steps`` steps on the first half, append, ``steps`` more steps over all rows (``--resume``);
* ``grown_new_rows_only``: the same, the last ``steps`` over the new rows only (``--new-rows-only``);
* ``all_rows``: ``2 · steps`` steps on the grown store from the start.

Writes ``benchmarks/results/bench_append.json``: each run's held-out NLL and error, the difference from
``all_rows`` (the issue asks |ΔNLL| ≤ 0.01 for ``grown``), the append's seconds and the rows of each half.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
from pathlib import Path

from benchmarks._common import Stopwatch, arguments, temporary_directory, write_results
from pep_gp.pipeline.data.append import append
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import Trainer, TrainJob

MODEL = "sparse-gp-classifier"


def half(source, first: bool, n_first: int):
    """``source`` limited to its first ``n_first`` rows (``first``) or to the rest, in file order."""
    def read():
        seen = 0
        for block in source.read():
            start, stop = seen, seen + len(block.y)
            seen = stop
            keep = slice(0, max(0, min(n_first, stop) - start)) if first else slice(max(0, n_first - start), None)
            rows = range(len(block.y))[keep]
            if len(rows):
                yield dataclasses.replace(block, X=block.X[keep], y=block.y[keep], rows=block.rows[keep],
                                          dropped=block.dropped if (start < n_first) == first else {})

    return dataclasses.replace(source, read=read)


def train(store, run_dir: Path, config: TrainConfig, resume: bool = False, new_rows_only: bool = False) -> dict:
    """One training segment; its last epoch record (held-out metrics of the store's test split)."""
    started = time.perf_counter()
    result = Trainer(TrainJob(MODEL, store, config, run_dir, new_rows_only), InProcess()).run(resume=resume)
    last = result.history[-1]
    return {"steps": result.steps, "test_nll": last["test_nll"], "test_error": last["test_error"],
            "seconds": round(time.perf_counter() - started, 1)}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_append``."""
    parser = arguments(__doc__)
    parser.add_argument("--steps", type=int, default=150, help="steps before the append, and after it")
    parser.add_argument("--batch-size", type=int, default=4000)
    parser.add_argument("--num-inducing", type=int, default=50)
    return parser


def main() -> None:
    args = cli().parse_args()
    config = TrainConfig(model={"num_inducing": args.num_inducing}, batch_size=args.batch_size, max_steps=args.steps,
                         tol=0.0, checkpoint_every=10 * args.steps)
    source = open_source("airline", SourceRequest(target="delayed"))
    n_rows = sum(len(block.y) for block in source.read())
    n_first = n_rows // 2
    with temporary_directory("bench-append-") as work:
        store_path = work / "flights.zarr"
        ingest(half(source, True, n_first), store_path)
        first = open_store(store_path)
        before = train(first, work / "grown", config)
        shutil.copytree(work / "grown", work / "grown_new_rows_only")
        with Stopwatch() as timer:
            summary = append(half(source, False, n_first), store_path)
        append_seconds = timer.seconds
        grown = open_store(store_path)
        runs = {"grown": train(grown, work / "grown", config, resume=True),
                "grown_new_rows_only": train(grown, work / "grown_new_rows_only", config, resume=True,
                                             new_rows_only=True),
                "all_rows": train(grown, work / "all_rows",
                                  config.model_copy(update={"max_steps": 2 * args.steps}))}
    reference = runs["all_rows"]["test_nll"]
    for run in runs.values():
        run["test_nll_minus_all_rows"] = run["test_nll"] - reference
    write_results("bench_append", {
        "model": MODEL, "config": config.model_dump(exclude_defaults=True),
        "rows": {"source": n_rows, "first_half": n_first, "second_half": n_rows - n_first},
        "store": {"first": {"train": first.n_rows("train"), "test": first.n_rows("test")},
                  "grown": {"train": summary.rows_train, "test": summary.rows_test},
                  "append_seconds": round(append_seconds, 2)},
        "before_append": before, "runs": runs,
        "grown_within_0.01": abs(runs["grown"]["test_nll_minus_all_rows"]) <= 0.01})


if __name__ == "__main__":
    main()
