"""Quantile Propagation inside the tied minibatch trainer (issue 11): ``tied-ep-classifier`` with EP's
(``projection = "kl"``) and QP's (``"wasserstein"``) site updates on the airline ``--target delayed``
store (bundled 2013 NYC flights, arrival more than 5 minutes late), each on a local 2-worker Dask
cluster, from the same start; held-out test NLL and error after every epoch, the difference QP − EP
after the last, and logistic regression and the class frequencies on the same store.

Usage::

    nice -n 10 .venv/bin/python -m benchmarks.bench_airline_qp [--store D.zarr] [--epochs 2]
        [--batch-size 10000] [--num-inducing 100] [--cluster local:2]

Without ``--store`` the bundled flights are ingested (``pep ingest airline --target delayed``) into a
temporary directory. Writes ``benchmarks/results/bench_airline_qp.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks._common import arguments, temporary_directory, write_results
from benchmarks._multiclass_run import baselines, run_sep
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.runs.config import TrainConfig

MODEL = "tied-ep-classifier"
# 10,000-row steps (27 per epoch) in 2,500-row blocks, cosine-decayed Adam, undamped SEP (ρ = 1).
AIRLINE_TIED = TrainConfig(model={"num_inducing": 100, "damping": 1.0}, batch_size=10_000, block_rows=2_500,
                           learning_rate=0.05, lr_schedule="cosine", epochs=2, checkpoint_every=10_000)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_airline_qp``."""
    parser = arguments(__doc__, cluster="local:2")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=AIRLINE_TIED.epochs)
    parser.add_argument("--batch-size", type=int, default=AIRLINE_TIED.batch_size)
    parser.add_argument("--num-inducing", type=int, default=AIRLINE_TIED.model["num_inducing"])
    return parser


def main() -> None:
    args = cli().parse_args()
    runs = {}
    with temporary_directory(prefix="pep-bench-airline-qp-") as work:
        path = args.store
        if path is None:
            path = work / "airline-delayed.zarr"
            ingest(open_source("airline", SourceRequest((), "delayed")), path)
        store = open_store(path)
        for method, projection in [("ep", "kl"), ("qp", "wasserstein")]:
            config = AIRLINE_TIED.model_copy(update={
                "epochs": args.epochs, "batch_size": args.batch_size,
                "model": {**AIRLINE_TIED.model, "num_inducing": args.num_inducing, "projection": projection}})
            runs[method] = run_sep(store, config, args.cluster, MODEL)
        sizes = {"n_train": store.n_rows("train"), "n_test": store.n_rows("test")}
        reference = baselines(store)
    final = {method: run["per_epoch"][-1] for method, run in runs.items()}
    write_results("bench_airline_qp", {
        "data": "airline 2013 (bundled), delayed (arrival > 5 min late)", **sizes, **runs, "baselines": reference,
        "qp_minus_ep": {metric: final["qp"][metric] - final["ep"][metric] for metric in ("test_nll", "test_error")}})


if __name__ == "__main__":
    main()
