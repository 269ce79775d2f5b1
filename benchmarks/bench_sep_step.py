"""Where one ``multiclass-sep`` training step goes, piece by piece (issue 5's speed goal).

Trains a few steps on a store with the given config in-process, then times each coordinator call of a
step after ``block_until_ready`` (median over ``--steps`` steps): the step-shared quantities with
their pullback, the site statistics through the engine, the tied-factor update with the refreshed
cavities, the data term through the engine, and the global term + chain rule + Adam update. For comparison, the same block functions called directly (jitted, on device arrays).

Usage::

    .venv/bin/python -m benchmarks.bench_sep_step [--store fmnist.zarr] [--steps 15] [--batch-size 200]
        [--mnist-dir /usr/share/datasets/fashion-mnist] [--kernel-products float64] [--name bench_sep_step]

Without ``--store``, Fashion-MNIST (``pep ingest mnist``) is ingested from ``--mnist-dir`` into a temporary
directory; the paper's MNIST settings of :mod:`benchmarks.bench_fashion_mnist` are used, with one block per
minibatch of ``--batch-size`` rows. Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import pep_gp.core
from pep_gp.core.kernels import PRODUCT_DTYPES
from benchmarks._common import arguments, temporary_directory, write_results
from benchmarks._multiclass_run import MODEL
from benchmarks.bench_fashion_mnist import PAPER_MNIST
from pep_gp.pipeline.training.trainer import EngineBatch, Trainer, TrainJob
from pep_gp.pipeline.engine.cache import BLOCKS
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.threads import compute_threads
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR
from pep_gp.pipeline.data.stores import Store, open_store


def timed(times: dict[str, list[float]], name: str, call: Callable[[], Any]) -> Any:
    """``call()``, waited for, with its seconds appended to ``times[name]``."""
    started = time.perf_counter()
    result = jax.block_until_ready(call())
    times.setdefault(name, []).append(time.perf_counter() - started)
    return result


def summed(handle: Any) -> tuple[Any, Any]:
    """A keeping pass's sum and its handle (:class:`~pep_gp.pipeline.engine.Pass`), for :func:`timed`."""
    return handle.sum(), handle


def profile(store: Store, steps: int, batch_size: int, kernel_products: str = "float64") -> dict[str, Any]:
    """Median milliseconds of each piece of a step, and of the direct block calls."""
    model = {**PAPER_MNIST.model, "kernel_products": kernel_products}
    config = PAPER_MNIST.model_copy(update={"epochs": 1, "batch_size": batch_size, "block_rows": batch_size,
                                            "model": model})
    times: dict[str, list[float]] = {}
    with temporary_directory(prefix="pep-bench-step-") as run_dir, compute_threads():
        trainer = Trainer(TrainJob(MODEL, store, config, run_dir), InProcess())
        state, compiled, train = trainer.fresh_state(), trainer.step_fn.parts, trainer.train
        for _ in range(3):  # compile everything
            trainer.step(state)
        for _ in range(steps):
            blocks = trainer.schedule.blocks(state.step)
            scale = trainer.n_total / train.rows(blocks)
            params = state.params
            batch = EngineBatch(train, blocks, scale, trainer.data_size)
            with pep_gp.core.float64():
                size = jnp.asarray(trainer.data_size, jnp.float64)
                shared, pullback = timed(times, "step-shared quantities + pullback",
                                         lambda: compiled.prepare(params, size))
                structure = jax.tree_util.tree_structure(shared)
                stats, first = timed(times, "site statistics (engine)",
                                     lambda: summed(batch.submit(compiled.site_term, (params, shared), keep=True)))
                params, shared, _ = timed(times, "tied-factor update + cavities",
                                          lambda: compiled.site_update(params, shared, stats, state.step, size))
                value, grad = timed(times, "data term + gradient (engine)",
                                    lambda: batch.submit(compiled.data_term, trainer.model.held(shared),
                                                         kept=first).sum())
                state.params, state.opt_state, *_ = timed(
                    times, "global term + chain rule + Adam",
                    lambda: compiled.ascend(params, state.opt_state, shared, pullback, value, grad, scale, size,
                                            structure))
            state.step += 1
        block = BLOCKS.get(train.source, 0)
        with pep_gp.core.float64():
            x, y, mask = block  # the cache's arrays, already on the device
            site_term, data_term = jax.jit(compiled.site_term), jax.jit(compiled.data_term)
            shared = compiled.prepare(state.params, jnp.asarray(trainer.data_size, jnp.float64))[0]
            inputs = (state.params, shared)
            kept = site_term(inputs, x, y, mask)[1]  # the block's rows, as the site-statistics pass keeps them
            held = trainer.model.held(shared)
            direct = {"site statistics (direct)": lambda: site_term(inputs, x, y, mask),
                      "data term + gradient (direct)": lambda: data_term(held, kept, y, mask)}
            for name, call in direct.items():
                timed({}, name, call)
                for _ in range(steps):
                    timed(times, name, call)
    medians = {name: round(1e3 * float(np.median(values)), 2) for name, values in times.items()}
    step_ms = sum(v for k, v in medians.items() if "direct" not in k)
    return {"config": config.model_dump(), "steps_timed": steps, "median_ms": medians, "step_ms": round(step_ms, 1),
            "seconds_per_epoch_estimate": round(step_ms / 1e3 * trainer.schedule.steps_per_epoch, 1)}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_sep_step``."""
    parser = arguments(__doc__, steps=15, name="bench_sep_step")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, default=PAPER_MNIST.batch_size)
    parser.add_argument("--mnist-dir", type=Path, default=DEBIAN_DIR)
    parser.add_argument("--kernel-products", choices=PRODUCT_DTYPES, default="float64")
    return parser


def main() -> None:
    args = cli().parse_args()
    with temporary_directory(prefix="pep-bench-step-data-") as work:
        path = args.store
        if path is None:
            path = work / "fashion-mnist.zarr"
            ingest(open_source("mnist", SourceRequest((args.mnist_dir,))), path)
        write_results(args.name, {"data": str(args.store or args.mnist_dir),
                                  **profile(open_store(path), args.steps, args.batch_size, args.kernel_products)})


if __name__ == "__main__":
    main()
