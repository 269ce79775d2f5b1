"""Airline delays, 3 classes (early / on time / late by more than 5 minutes; Villacampa-Calvo & Hernández-Lobato 2017, §4.4), with
``multiclass-sep`` on a local 2-worker Dask cluster (one core per worker), beside logistic regression and the class
frequencies in the same run (issue 5; reference measured here: logistic regression 43.4 % / 0.943).

Usage::

    .venv/bin/python benchmarks/bench_airline_multiclass.py [--store A.zarr] [--epochs 3]
        [--batch-size 10000] [--num-inducing 200] [--cluster local:2:pinned]

Without ``--store`` the bundled 2013 NYC flights are ingested (``pep ingest airline``, 3 classes) into a
temporary directory. Writes ``benchmarks/results/bench_airline_multiclass.json``: test error and NLL
after every epoch, seconds per epoch (training steps only), the coordinator's state size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks._common import arguments, temporary_directory, write_results
from benchmarks._multiclass_run import airline_classes, baselines, run_sep
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.data.stores import open_store

# M = 200 per class as the paper; 10,000-row steps (27 per epoch) in 2,500-row blocks, cosine-decayed Adam.
AIRLINE_SEP = TrainConfig(model={"num_inducing": 200, "damping": 1.0, "damping_decay": 1.0, "alpha": 1.0,
                                 "likelihood": "pairwise", "train_inducing": True},
                          batch_size=10_000, block_rows=2_500, learning_rate=0.05, lr_schedule="cosine", epochs=3,
                          checkpoint_every=10_000)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_airline_multiclass``."""
    parser = arguments(__doc__)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=AIRLINE_SEP.epochs)
    parser.add_argument("--batch-size", type=int, default=AIRLINE_SEP.batch_size)
    parser.add_argument("--num-inducing", type=int, default=AIRLINE_SEP.model["num_inducing"])
    parser.add_argument("--learning-rate", type=float, default=AIRLINE_SEP.learning_rate)
    parser.add_argument("--cluster", default="local:2:pinned",
                        help="local:2:pinned by default: one core per worker does not oversubscribe a 2-core machine")
    return parser


def main() -> None:
    args = cli().parse_args()
    config = AIRLINE_SEP.model_copy(update={"epochs": args.epochs, "batch_size": args.batch_size,
                                            "model": {**AIRLINE_SEP.model, "num_inducing": args.num_inducing},
                                            "learning_rate": args.learning_rate})
    with temporary_directory(prefix="pep-bench-airline-") as work:
        store = open_store(args.store or airline_classes(work))
        reference = baselines(store)
        sep = run_sep(store, config, args.cluster)
        sizes = {"n_train": store.n_rows("train"), "n_test": store.n_rows("test")}
    write_results("bench_airline_multiclass", {"data": "airline 2013 (bundled), 3 classes", **sizes,
                                               "sep": sep, "baselines": reference,
                                               "reference": {"logistic regression": [0.434, 0.943],
                                                             "GPyTorch SVGP after 1.4 epochs": [0.394, 0.889]}})


if __name__ == "__main__":
    main()
