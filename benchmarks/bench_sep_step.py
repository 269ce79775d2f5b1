"""Where one ``multiclass-sep`` training step goes, piece by piece, against the machine's floor for it and
GPyTorch's SVGP step on the same minibatch (issues 5 and 66).

Trains a few steps on a store with the given config in-process, then times each coordinator call of a
step after ``block_until_ready`` (median over ``--steps`` steps), as the step makes them
(:func:`pep_gp.pipeline.training.step.training_step`): the step-shared quantities with their pullback, the
site statistics through the engine (which keeps each block's row projections), the tied-factor update with
the refreshed cavities, the data term and its gradient through the engine, and the global term + chain rule
+ Adam update; then whole steps through the trainer. For comparison, the same block functions called
directly (jitted, on device arrays).

The floor (:func:`floor`): the floating-point operations of one step counted analytically
(:func:`analytic_flops`: the kernel matrices over the D inputs, forward and backward, the Cholesky factors,
triangular solves and the O(C·B·M²) products, per class), XLA's own count of each of the step's compiled
programs (its cost analysis, which leaves out LAPACK's factorisations and solves, custom calls to it, and
counts the body of the per-class loop around them once), and
this machine's float64 and float32 matrix-product rates (:func:`matmul_rates`: the step's own shapes and a
large square product), whose quotient is the time the step could not go below. GPyTorch's SVGP
(:func:`benchmarks.compare.gpytorch_svgp`, float32) takes ``--steps`` steps on the first minibatch's rows in
the same run (skipped without gpytorch or with ``--no-gpytorch``).

Usage::

    .venv/bin/python -m benchmarks.bench_sep_step [--store fmnist.zarr] [--steps 15] [--batch-size 200]
        [--mnist-dir /usr/share/datasets/fashion-mnist] [--kernel-products float64] [--no-gpytorch]
        [--name bench_sep_step]

Without ``--store``, Fashion-MNIST (``pep ingest mnist``) is ingested from ``--mnist-dir`` into a temporary
directory; the paper's MNIST settings of :mod:`benchmarks.bench_fashion_mnist` are used, with one block per
minibatch of ``--batch-size`` rows. Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import json
import os
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
from pep_gp.pipeline.training.step import Prepare, WithShared
from pep_gp.pipeline.training.trainer import EngineBatch, Trainer, TrainJob
from pep_gp.pipeline.engine.cache import BLOCKS, Derived, derived
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.threads import compute_threads
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR
from pep_gp.pipeline.data.stores import Store, open_store

SQUARE = 2048
"""The side of the large square matrix product whose rate is the machine's (:func:`matmul_rates`)."""


def timed(times: dict[str, list[float]], name: str, call: Callable[[], Any]) -> Any:
    """``call()``, waited for, with its seconds appended to ``times[name]``."""
    started = time.perf_counter()
    result = jax.block_until_ready(call())
    times.setdefault(name, []).append(time.perf_counter() - started)
    return result


def summed(handle: Any) -> tuple[Any, Any]:
    """A keeping pass's sum and its handle (:class:`~pep_gp.pipeline.engine.Pass`), for :func:`timed`."""
    return handle.sum(), handle


def analytic_flops(classes: int, inducing: int, dim: int, rows: int, blocks: int = 1) -> dict[str, float]:
    """Floating-point operations of one SEP step of ``multiclass-sep`` (C = ``classes``, M = ``inducing``,
    D = ``dim``, B = ``rows`` in ``blocks`` blocks), by part, counting a product of ``[a, b]`` and ``[b, c]``
    as ``2abc``, a Cholesky factor as ``M³/3`` and a triangular solve with ``M`` right-hand sides as ``M³``;
    element-wise passes are left out.

    Per class: the Gram matrix ``K = k(Z, Z)`` over the D inputs and its backward pass (one product each,
    ``2M²D``; :func:`pep_gp.core.kernels._symmetric_gram`), the cross matrix ``k(Z, X)`` and its backward
    pass (``2MBD`` each, the data not differentiated); ``chol(K)`` and its inverse, the cavity
    (``LᵀΛL``: two products; ``chol(I + sLᵀΛL)``, one solve) with their pullback (three products,
    :func:`pep_gp.core.linalg.cholesky_and_inverse`); the site update's cavity and ``q`` (one ``LᵀΛL``, two
    factorisations and solves); the global term's prior part ``L⁻¹S_q`` and its backward pass (two
    products, ``q`` held: :func:`pep_gp.core.sep.prior_surrogate`); the rows' projections ``υ = L⁻ᵀL⁻¹k`` (two ``2M²B`` products), the
    cavity's variances along them and the site precisions ``Σ Δυυᵀ`` (``2M²B`` each), and the data term's
    backward pass through them (twice the forward's). ``pep's extra pullbacks``: what pep computes beyond
    this, each block pulling its gradient back through ``S`` itself (a Gram backward pass and the
    factorisation's pullback per block, :class:`~pep_gp.pipeline.training.step.RowDataTerm`)."""
    c, m, d, b = classes, inducing, dim, rows
    cube, chol, solve = 2.0 * m**3, m**3 / 3.0, float(m**3)
    parts = {
        "kernel products over D (Gram and cross, forward and backward)": c * (2 * 2 * m * m * d + 2 * 2 * m * b * d),
        "Cholesky factors, solves and M³ products (prior, cavities, q, prior term, pullback)":
            c * ((chol + solve) + (2 * cube + chol + solve) + (2 * cube + 2 * (chol + solve)) + 2 * cube + 3 * cube),
        "row projections, site sums and their backward pass (O(B·M²))": c * (4 + 2 + 2 + 2 * 6) * m * m * b,
    }
    parts["pep's extra pullbacks (one per block)"] = blocks * c * (2 * m * m * d + 3 * cube)
    return {name: float(value) for name, value in parts.items()}


def matmul_rates(classes: int, inducing: int, dim: int, rows: int,
                 repeats: int = 20) -> dict[str, dict[str, dict[str, float]]]:
    """This machine's GFLOP/s in float64 and float32 (jitted, best of ``repeats``): the step's Gram
    product ``ZZᵀ`` ``[C, M, D]·[C, M, D]ᵀ`` and cross product ``ZXᵀ`` ``[C, M, D]·[B, D]ᵀ`` as the kernels
    write them (:mod:`pep_gp.core.kernels`), and a square ``SQUARE``² one: per wall second (``wall``), and
    per CPU second of the process times its cores (``cores``: what the machine gives when idle, if the
    product uses every core; not inflated by other processes' load as the wall rate is)."""
    c, m, d, b, n = classes, inducing, dim, rows, SQUARE
    products = {"gram [C, M, D]·[C, M, D]ᵀ": ("cmd,cnd->cmn", (c, m, d), (c, m, d), 2.0 * c * m * m * d),
                "cross [C, M, D]·[B, D]ᵀ": ("cmd,bd->cmb", (c, m, d), (b, d), 2.0 * c * m * b * d),
                f"square {SQUARE}²": ("ij,jk->ik", (n, n), (n, n), 2.0 * n**3)}
    rates: dict[str, dict[str, dict[str, float]]] = {}
    with pep_gp.core.float64():
        for dtype in ("float64", "float32"):
            for name, (spec, left, right, flops) in products.items():
                operands = [jax.random.normal(jax.random.key(i), shape, dtype) for i, shape in enumerate((left, right))]
                product = jax.jit(lambda u, v, spec=spec: jnp.einsum(spec, u, v))
                jax.block_until_ready(product(*operands))
                wall, cpu = [], []
                for _ in range(repeats):
                    started, used = time.perf_counter(), time.process_time()
                    jax.block_until_ready(product(*operands))
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - used)
                rates.setdefault(dtype, {})[name] = {"wall": round(flops / min(wall) / 1e9, 1),
                                                     "cores": round(flops * len(os.sched_getaffinity(0)) / min(cpu) / 1e9, 1)}
    return rates


def xla_flops(programs: dict[str, tuple[Callable, tuple, dict]]) -> dict[str, float]:
    """XLA's cost analysis of each jitted ``(program, args, kwargs)``: its flops (0 where it has none)."""
    flops = {}
    for name, (program, args, kwargs) in programs.items():
        analysis = program.lower(*args, **kwargs).compile().cost_analysis()
        analysis = analysis[0] if isinstance(analysis, list) else analysis
        flops[name] = float((analysis or {}).get("flops", 0.0))
    return flops


def floor(analytic: dict[str, float], xla: dict[str, float], rates: dict[str, dict[str, dict[str, float]]]
          ) -> dict[str, Any]:
    """The floor of one step: the analytic count without pep's extra pullbacks over the machine's float64
    rate (the large square product's, per CPU second times the cores: :func:`matmul_rates`), and with the
    kernel products at the float32 rate; pep's own count over the same."""
    square = f"square {SQUARE}²"
    products = next(value for name, value in analytic.items() if name.startswith("kernel products"))
    needed = sum(value for name, value in analytic.items() if not name.startswith("pep's"))
    implemented = sum(analytic.values())
    per_ms = {dtype: rates[dtype][square]["cores"] * 1e6 for dtype in rates}  # flops per millisecond
    return {"analytic_gflop": {name: round(value / 1e9, 3) for name, value in analytic.items()},
            "analytic_gflop_needed": round(needed / 1e9, 3),
            "analytic_gflop_as_implemented": round(implemented / 1e9, 3),
            "xla_gflop": {name: round(value / 1e9, 3) for name, value in xla.items()},
            "xla_gflop_total": round(sum(xla.values()) / 1e9, 3),
            "gflop_per_second": rates,
            "floor_ms": {"float64": round(needed / per_ms["float64"], 1),
                         "float32 kernel products": round(products / per_ms["float32"]
                                                          + (needed - products) / per_ms["float64"], 1),
                         "float64, as implemented": round(implemented / per_ms["float64"], 1)}}


def profile(store: Store, steps: int, batch_size: int, kernel_products: str = "float64") -> dict[str, Any]:
    """Median milliseconds of each piece of a step, of whole steps and of the direct block calls, and
    XLA's flops of each of the step's programs."""
    model = {**PAPER_MNIST.model, "kernel_products": kernel_products}
    config = PAPER_MNIST.model_copy(update={"epochs": 1, "batch_size": batch_size, "block_rows": batch_size,
                                            "model": model})
    times: dict[str, list[float]] = {}
    with temporary_directory(prefix="pep-bench-step-") as run_dir, compute_threads():
        trainer = Trainer(TrainJob(MODEL, store, config, run_dir), InProcess())
        state, compiled, train, energy = trainer.fresh_state(), trainer.step_fn.parts, trainer.train, trainer.model
        prepare = Prepare(energy)
        site_term = Derived(compiled.site_term, WithShared(prepare, pullback=True))
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
                                         lambda: derived(prepare, (params, size)))
                structure = jax.tree_util.tree_structure(shared)
                stats, first = timed(times, "site statistics (engine)",
                                     lambda: summed(batch.submit(site_term, (params, size), keep=True)))
                params, shared, _ = timed(times, "tied-factor update + cavities",
                                          lambda: compiled.site_update(params, shared, stats, state.step, size))
                value, grad = timed(times, "data term + gradient (engine)",
                                    lambda: batch.submit(compiled.data_term, energy.held(shared), kept=first).sum())
                first.release()
                state.params, state.opt_state, *_ = timed(
                    times, "global term + chain rule + Adam",
                    lambda: compiled.ascend(params, state.opt_state, shared, pullback, value, grad, scale, size,
                                            structure))
            state.step += 1
        whole_cpu = []
        for _ in range(steps):
            used = time.process_time()
            timed(times, "whole step (trainer)", lambda: trainer.step(state))
            whole_cpu.append(time.process_time() - used)
        block = BLOCKS.get(train.source, 0)
        with pep_gp.core.float64():
            x, y, mask = block  # the cache's arrays, already on the device
            size = jnp.asarray(trainer.data_size, jnp.float64)
            shared, pullback = compiled.prepare(state.params, size)
            inputs = (state.params, shared, pullback)
            site_program, data_program = jax.jit(compiled.site_term), jax.jit(compiled.data_term)
            stats, kept = site_program(inputs, x, y, mask)
            updated, refreshed, _ = compiled.site_update(state.params, shared, stats, state.step, size)
            held = energy.held(refreshed)
            direct = {"site statistics (direct)": lambda: site_program(inputs, x, y, mask),
                      "data term + gradient (direct)": lambda: data_program(held, inputs, kept, y, mask)}
            for name, call in direct.items():
                timed({}, name, call)
                for _ in range(steps):
                    timed(times, name, call)
            value, grad = data_program(held, inputs, kept, y, mask)
            scale = trainer.n_total / train.rows([0])
            xla = xla_flops({
                "prepare": (compiled.prepare, (state.params, size), {}),
                "row_site_term": (site_program, (inputs, x, y, mask), {}),
                "site_update": (compiled.site_update, (state.params, shared, stats, state.step, size), {}),
                "row_data_term": (data_program, (held, inputs, kept, y, mask), {}),
                "ascend": (compiled.ascend, (updated, state.opt_state, refreshed, pullback, value, grad, scale, size),
                           {"structure": jax.tree_util.tree_structure(shared)})})
    medians = {name: round(1e3 * float(np.median(values)), 2) for name, values in times.items()}
    step_ms = sum(v for k, v in medians.items() if "direct" not in k and "whole" not in k)
    return {"config": config.model_dump(), "steps_timed": steps, "median_ms": medians, "step_ms": round(step_ms, 1),
            "seconds_per_epoch_estimate": round(step_ms / 1e3 * trainer.schedule.steps_per_epoch, 1),
            "whole_step_cpu_ms": round(1e3 * float(np.median(whole_cpu)), 1), "xla": xla, "shape": {"classes": int(state.params.inducing.shape[0]),
                                  "inducing": int(state.params.inducing.shape[1]),
                                  "dim": int(state.params.inducing.shape[2]), "rows": batch_size}}


def gpytorch_step_ms(store: Store, batch_size: int, steps: int) -> dict[str, Any]:
    """Median milliseconds of GPyTorch's SVGP step (:func:`benchmarks.compare.gpytorch_svgp`, the
    comparison's model and settings) on the first ``batch_size`` training rows, after three steps: wall and
    CPU (the process's, all threads)."""
    import torch

    from benchmarks.compare import _arrays, gpytorch_svgp

    x, y, _, _ = _arrays(store, PAPER_MNIST.standardize)
    svgp = gpytorch_svgp(x, y, PAPER_MNIST.model["num_inducing"])
    rows, labels = torch.from_numpy(x[:batch_size]), torch.from_numpy(y[:batch_size])
    wall, cpu = [], []
    for step in range(3 + steps):
        started, used = time.perf_counter(), time.process_time()
        svgp.step(rows, labels)
        if step >= 3:
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
    return {"step_ms": round(1e3 * float(np.median(wall)), 1), "cpu_ms": round(1e3 * float(np.median(cpu)), 1),
            "dtype": "float32",
            "torch_threads": torch.get_num_threads()}


def table(payload: dict) -> str:
    """The results page's tables of one run (``benchmarks/results/NAME.json``): the step's pieces, the whole
    step, GPyTorch's step and the floor in milliseconds; then the floor's count, analytic by part and XLA's
    by program, and the machine's rates. Runs without a floor (before issue 66) give the first rows only."""
    machine, config = payload["machine"], payload["config"]
    products = config["model"].get("kernel_products", "float64")
    load = f", load average {machine['load_avg'][0]:.1f} when written" if "load_avg" in machine else ""
    lines = [f"{', '.join(machine['devices'])}, JAX {machine['jax']}, minibatch {config['batch_size']}, kernel products "
             f"in {products}, median of {payload['steps_timed']} steps{load}:", "", "| one step | ms |", "|---|---|"]
    pieces = {name: ms for name, ms in payload["median_ms"].items() if "direct" not in name and "whole" not in name}
    lines += [f"| {name} | {ms:.1f} |" for name, ms in pieces.items()]
    lines.append(f"| **pep, the pieces' sum** | **{payload['step_ms']:.1f}** |")
    if "whole step (trainer)" in payload["median_ms"]:
        lines.append(f"| pep, whole step through the trainer (CPU ms) | {payload['median_ms']['whole step (trainer)']:.1f} "
                     f"({payload['whole_step_cpu_ms']:.1f}) |")
    if "gpytorch_svgp" in payload:
        gpytorch = payload["gpytorch_svgp"]
        lines.append(f"| GPyTorch SVGP, same rows, float32 (CPU ms) | {gpytorch['step_ms']:.1f} ({gpytorch['cpu_ms']:.1f}) |")
    if "floor" not in payload:
        return "\n".join(lines)
    floor_ = payload["floor"]
    lines += [f"| floor: {name} | {ms:.1f} |" for name, ms in floor_["floor_ms"].items()]
    lines += ["", "| FLOPs of one step | GFLOP |", "|---|---|"]
    lines += [f"| analytic: {name} | {gflop:.3f} |" for name, gflop in floor_["analytic_gflop"].items()]
    lines.append(f"| **analytic, needed (as implemented)** | **{floor_['analytic_gflop_needed']:.3f}** "
                 f"({floor_['analytic_gflop_as_implemented']:.3f}) |")
    lines += [f"| XLA: {name} | {gflop:.3f} |" for name, gflop in floor_["xla_gflop"].items()]
    lines.append(f"| **XLA, all programs** | **{floor_['xla_gflop_total']:.3f}** |")
    rates = floor_["gflop_per_second"]
    lines += ["", "| GFLOP/s, wall (cores × per CPU second) | " + " | ".join(rates["float64"]) + " |",
              "|---|" + "---|" * len(rates["float64"])]
    lines += [f"| {dtype} | " + " | ".join(f"{rate['wall']:.1f} ({rate['cores']:.1f})" for rate in by_shape.values())
              + " |" for dtype, by_shape in rates.items()]
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_sep_step``."""
    parser = arguments(__doc__, steps=15, name="bench_sep_step")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--batch-size", type=int, default=PAPER_MNIST.batch_size)
    parser.add_argument("--mnist-dir", type=Path, default=DEBIAN_DIR)
    parser.add_argument("--kernel-products", choices=PRODUCT_DTYPES, default="float64")
    parser.add_argument("--no-gpytorch", action="store_true", help="skip GPyTorch's SVGP step")
    return parser


def main() -> None:
    args = cli().parse_args()
    with temporary_directory(prefix="pep-bench-step-data-") as work:
        path = args.store
        if path is None:
            path = work / "fashion-mnist.zarr"
            ingest(open_source("mnist", SourceRequest((args.mnist_dir,))), path)
        store = open_store(path)
        result = profile(store, args.steps, args.batch_size, args.kernel_products)
        shape = result.pop("shape")
        result["floor"] = floor(analytic_flops(**shape), result.pop("xla"), matmul_rates(**shape))
        if not args.no_gpytorch:
            result["gpytorch_svgp"] = gpytorch_step_ms(store, args.batch_size, args.steps)
        path = write_results(args.name, {"data": str(args.store or args.mnist_dir), **result})
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
