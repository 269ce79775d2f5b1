"""The deep GP on the airline delays (issue 10): pep's DGP and one-layer GP trained by the distributed
trainer on a local cluster, beside a linear model and GPyTorch's ``DeepGP`` on the same rows.

The store is ``pep ingest airline --target delay`` (the bundled 2013 NYC flights: 263,853 training and
10,000 test rows, 8 features, arrival delay in minutes). pep's models are ``deep-gp`` with
``hidden_dims = [width]`` and ``[]`` (the one-layer sparse GP), trained on ``--cluster`` for
``--epochs`` passes in minibatches of ``--batch-size`` rows cut into blocks of ``--block-rows`` (one
per worker); the held-out RMSE and log-likelihood are the trainer's own evaluation on the test split.
The linear model is scikit-learn's least squares on the standardised inputs with the training
residuals' variance as its Gaussian noise. GPyTorch's model is :func:`benchmarks.bench_dgp.fit_gpytorch`
(its documented deep-GP example at the same width and M) with the same number of Adam steps, rows per
step and learning rate, in this process. Coordinator memory is this process's peak RSS after pep's
runs (before the other models load the arrays).

Needs the ``bench`` extra::

    pep ingest airline --out delay.zarr --target delay
    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python -m benchmarks.bench_dgp_airline --store delay.zarr
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np

from benchmarks._common import arguments, temporary_directory, write_results
from benchmarks.bench_dgp import fit_gpytorch, scores
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.engine import connect
from pep_gp.pipeline.training.trainer import TrainJob, train
def fit_pep(hidden: list[int], store, backend, run_dir: Path, args) -> dict:
    """``deep-gp`` with ``hidden`` widths on ``backend``: per-epoch seconds and the last held-out metrics."""
    config = TrainConfig(model={"hidden_dims": hidden, "num_inducing": args.inducing}, epochs=args.epochs,
                         batch_size=args.batch_size, block_rows=args.block_rows,
                         learning_rate=args.learning_rate, seed=args.seed)
    result = train(TrainJob("deep-gp", store, config, run_dir), backend)
    last = result.history[-1]
    return {"test_ll": -last["test_nll"], "rmse": last["rmse"], "n_test": last["n_test"], "steps": result.steps,
            "seconds": result.seconds, "seconds_per_epoch": result.seconds / result.epochs,
            "rejected_steps": result.rejected_steps, "history": result.history}


def fit_linear(x, y, x_test, y_test) -> dict:
    """Least squares on standardised inputs; Gaussian noise of the training residuals' variance."""
    from sklearn.linear_model import LinearRegression

    start = time.perf_counter()
    mean, std = x.mean(0), np.where(x.std(0) > 0, x.std(0), 1.0)
    model = LinearRegression().fit((x - mean) / std, y)
    noise = np.var(y - model.predict((x - mean) / std))
    predicted = model.predict((x_test - mean) / std)
    return {**scores(y_test, predicted, np.full_like(predicted, noise)), "seconds": time.perf_counter() - start}


def arrays(store, split: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = store.arrays(split)
    return np.asarray(x[:], np.float64), np.asarray(y[:], np.float64)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_dgp_airline``."""
    parser = arguments(__doc__, cluster="local:2", name="bench_dgp_airline")
    parser.add_argument("--store", required=True, help="a store from `pep ingest airline --target delay`")
    parser.add_argument("--width", type=int, default=2, help="the DGP's hidden width")
    parser.add_argument("--inducing", type=int, default=50, help="M per GP")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--block-rows", type=int, default=1000)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=3, help="GPyTorch's likelihood samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None, help="keep pep's run directories here (default: a temporary one)")
    return parser


def main(argv=None) -> dict:
    args = cli().parse_args(argv)
    store = open_store(args.store)
    results = {"settings": vars(args), "store": {"rows_train": store.n_rows("train"), "rows_test": store.n_rows("test"),
                                                 "checksum": store.checksum}, "models": {}}
    with temporary_directory() as scratch:
        runs = Path(args.run_dir or scratch)
        backend = connect(args.cluster)
        try:
            for name, hidden in ((f"pep DGP {args.width}", [args.width]), ("pep GP", [])):
                results["models"][name] = fit_pep(hidden, store, backend, runs / name.replace(" ", "-"), args)
                print(name, {k: v for k, v in results["models"][name].items() if k != "history"}, flush=True)
        finally:
            backend.close()
    results["coordinator_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    data = (*arrays(store, "train"), *arrays(store, "test"))
    results["models"]["linear (scikit-learn)"] = fit_linear(*data)
    args.m, args.steps = args.inducing, results["models"][f"pep DGP {args.width}"]["steps"]
    results["models"][f"GPyTorch DeepGP {args.width}"] = fit_gpytorch((args.width,), *data, args)
    for name, row in results["models"].items():
        print(f"{name}: test LL {row['test_ll']:.4f}, RMSE {row['rmse']:.3f}, {row['seconds']:.1f} s", flush=True)
    write_results(args.name, results)
    return results


if __name__ == "__main__":
    main()
