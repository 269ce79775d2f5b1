"""The class-parallel multi-class SEP step beside today's, at Fashion-MNIST's shape (C = 10 classes, M = 200
inducing points per class, D = 784 inputs, minibatch 200 in one block).

Usage::

    .venv/bin/python -m benchmarks.bench_class_parallel [--steps 20] [--rows 2000] [--name bench_class_parallel]

Synthetic rows of that shape (uniform pixels in [0, 1], uniform labels; the step's cost does not depend on
the values) are ingested into a temporary store and ``multiclass-sep`` is trained with the paper's MNIST
settings (:data:`benchmarks.bench_fashion_mnist.PAPER_MNIST`) from the same initial parameters by

* ``today``: the trainer's step (:mod:`pep_gp.pipeline.training.step`), in this process;
* ``grouped``: the class-parallel step (:mod:`pep_gp.pipeline.training.class_groups`) in this process, 2 groups
  (``grouped-threads``: each group's calls on a thread of its own);
* ``workers-1``, ``workers-2``: the class-parallel step with one group per worker of a ``local:2:pinned``
  cluster (TLS on; ``workers-1`` uses the first worker only); each worker reads the minibatch's rows from
  the store itself (:class:`~pep_gp.pipeline.training.class_groups.StoreRows`).

Each step of the ``--steps`` timed ones (after 2 warm-up steps) runs every variant once in turn, so all see
the same load. Per variant: median and minimum seconds per step; for ``grouped``, the seconds of each
group's calls and of the rest (the coordinator's row programs: the work that splitting by class cannot
share); and a digest of the parameters after the last step (the class-parallel variants' must agree: the
same bits for every grouping); for the workers, the array bytes sent to and received from each worker per
step (the method calls' arguments and results). Writes ``benchmarks/results/NAME.json`` with ``uptime``'s load before and after.

``--train-epochs E`` also trains on Fashion-MNIST itself (``--max-train-rows`` of it; every test image) as
``pep train`` does, with its evaluation after every epoch, for ``E`` epochs per variant, one after the other:
by rows in this process (today's default), by classes in this process (a group per core, on threads), by
classes on ``local:1:pinned`` and ``local:2:pinned``, and by rows on ``local:2:pinned``; per variant the seconds per epoch of the training steps, the wall time with the
evaluations, and the held-out metrics (:func:`benchmarks._multiclass_run.run_sep`). Seconds per epoch are those of
the last epoch's training steps (with ``E`` ≥ 2 they leave out the first epoch's compiling and, by classes,
placing the groups on the workers, which the first epoch's seconds show).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import arguments, temporary_directory, uptime, write_results
from benchmarks._multiclass_run import run_sep
from benchmarks.bench_fashion_mnist import PAPER_MNIST, fashion_mnist_store
from pep_gp.core import float64
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.clusters import local_cluster
from pep_gp.pipeline.engine.threads import compute_threads
from pep_gp.pipeline.engine.in_process import InThreads
from pep_gp.pipeline.engine.residents import Residents
from pep_gp.pipeline.training.class_groups import ClassParallelStep, Groups, StoreRows
from pep_gp.pipeline.training.optimiser import step_arguments
from pep_gp.pipeline.training.trainer import Trainer, TrainJob

CLASSES, INPUTS, BATCH, WARM_UP = 10, 784, 200, 2
TRAINED = (("none", "rows"), ("none", "classes"), ("local:1:pinned", "classes"), ("local:2:pinned", "classes"),
           ("local:2:pinned", "rows"))


class TimedThreads(InThreads):
    """:class:`InThreads` (one after the other) that adds up the seconds of each group's calls."""

    def __init__(self, groups: list):
        super().__init__(groups)
        self.seconds = [0.0] * len(groups)

    def each(self, method: str, args: list[tuple]) -> list:
        results = []
        for g, (group, given) in enumerate(zip(self.objects, args)):
            started = time.perf_counter()
            results.append(jax.block_until_ready(getattr(group, method)(*given)))
            self.seconds[g] += time.perf_counter() - started
        return results


def synthetic_store(work: Path, rows: int) -> Any:
    """A store of ``rows`` training rows of Fashion-MNIST's shape (and a tenth as many test rows)."""
    rng = np.random.default_rng(0)
    total = rows + rows // 10
    np.savez(work / "rows.npz", X=rng.uniform(size=(total, INPUTS)), y=np.arange(total) % CLASSES)
    ingest(open_source("npz", SourceRequest((work / "rows.npz",), None, "classification")), work / "rows.zarr",
           test_size=str(rows // 10), seed=0)
    return open_store(work / "rows.zarr")


def digest(tree: Any) -> str:
    return hashlib.sha256(b"".join(np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(tree))).hexdigest()


def summary(seconds: list[float]) -> dict[str, float]:
    timed = seconds[WARM_UP:]
    return {"median_s": round(float(np.median(timed)), 4), "min_s": round(float(np.min(timed)), 4)}


def run(rows: int, steps: int) -> dict[str, Any]:
    config = PAPER_MNIST.model_copy(update={"epochs": 100})
    load_before = uptime()
    with temporary_directory(prefix="pep-bench-classpar-") as work, compute_threads():
        trainer = Trainer(TrainJob("multiclass-sep", synthetic_store(work, rows), config, None), InProcess())
        state = trainer.fresh_state()
        arguments = step_arguments(trainer.spec, trainer.settings, trainer.job.config,
                                   trainer.schedule.steps_per_epoch, 0)
        parallel = ClassParallelStep(trainer.model, arguments["optimizer"], arguments["damping"])
        grouped = Groups(parallel.init(state.params, 2), TimedThreads)
        backend = local_cluster(2, "local:2:pinned", pinned=True)
        try:
            variants = {"grouped": grouped,
                        "grouped-threads": Groups(parallel.init(state.params, 2), partial(InThreads, threads=True)),
                        **{f"workers-{w}": Groups(parallel.init(state.params, w), partial(Residents, backend.client))
                           for w in (1, 2)}}
            seconds: dict[str, list[float]] = {name: [] for name in ("today", *variants)}
            group_seconds, total_grouped = [], 0.0
            for s in range(WARM_UP + steps):
                blocks = trainer.schedule.blocks(s)
                scale = trainer.n_total / trainer.train.rows(blocks)
                block = [trainer.train.source.read(b) for b in blocks]
                x, y, mask = (np.concatenate([getattr(r, f) for r in block]) for f in ("x", "y", "mask"))
                stored = StoreRows(trainer.train.source, tuple(blocks))  # read where each group is
                with float64():
                    on_device = jnp.asarray(x)
                started = time.perf_counter()
                trainer.step(state)
                seconds["today"].append(time.perf_counter() - started)
                for name, groups in variants.items():
                    before = list(grouped.placement.seconds)
                    started = time.perf_counter()
                    info = parallel.update(groups, s, on_device if name.startswith("grouped") else stored, y, mask, scale,
                                           trainer.data_size)
                    jax.block_until_ready(info)
                    seconds[name].append(time.perf_counter() - started)
                    if s == WARM_UP - 1 and name.startswith("workers"):
                        groups.placement.sent = groups.placement.received = 0
                    if name == "grouped" and s >= WARM_UP:
                        group_seconds.append([after - b for after, b in zip(grouped.placement.seconds, before)])
                        total_grouped += seconds[name][-1]
            traffic = {name: tuple(round(count / steps / len(groups.sizes))
                                   for count in (groups.placement.sent, groups.placement.received))
                       for name, groups in variants.items() if name.startswith("workers")}
            digests = {"today": digest((state.params, state.opt_state)),
                       **{name: digest(parallel.state(groups)) for name, groups in variants.items()}}
        finally:
            backend.close()
    per_group = np.median(np.asarray(group_seconds), axis=0)
    results = {name: {**summary(values), "params_sha256": digests[name]} for name, values in seconds.items()}
    for name, (sent, received) in traffic.items():
        results[name]["array_bytes_per_worker_and_step"] = {"sent": sent, "received": received}
    one, two = results["workers-1"], results["workers-2"]
    return {
        "shape": {"classes": CLASSES, "inducing": config.model["num_inducing"], "inputs": INPUTS, "batch": BATCH,
                  "training_rows": rows},
        "steps_timed": steps, "warm_up_steps": WARM_UP, "variants": results,
        "grouped_split_s": {"group_median_s": [round(float(t), 4) for t in per_group],
                            "coordinator_median_s": round(results["grouped"]["median_s"] - float(per_group.sum()), 4)},
        "speedup_2_workers_over_1": {"median": round(one["median_s"] / two["median_s"], 3),
                                     "min": round(one["min_s"] / two["min_s"], 3)},
        "class_parallel_bits_agree": len({results[n]["params_sha256"] for n in variants}) == 1,
        "load": {"before": load_before,
                 "after": uptime()},
    }


def trained(epochs: int, max_train_rows: int | None) -> dict[str, Any]:
    """The :data:`TRAINED` variants of ``pep train`` on Fashion-MNIST (see the module docstring)."""
    config = PAPER_MNIST.model_copy(update={"epochs": epochs})
    runs = {}
    with temporary_directory(prefix="pep-bench-classpar-train-") as work:
        store = fashion_mnist_store(DEBIAN_DIR, work, max_train_rows)
        for cluster, over in TRAINED:
            run = run_sep(store, config.model_copy(update={"parallel_over": over}), cluster)
            *_, before, last = [{"training_seconds": 0.0}, *run["per_epoch"]]
            runs[f"{cluster} by {over}"] = {
                "first_epoch_seconds": run["per_epoch"][0]["training_seconds"],
                "seconds_per_epoch": round(last["training_seconds"] - before["training_seconds"], 2),
                "wall_seconds_with_evaluation": run["wall_seconds_with_evaluation"],
                "test_error": last["test_error"], "test_nll": last["test_nll"], "peak_rss_mb": run["peak_rss_mb"]}
            print(cluster, over, runs[f"{cluster} by {over}"], flush=True)
        n_train = store.n_rows("train")
    one, two = runs["local:1:pinned by classes"], runs["local:2:pinned by classes"]
    return {"epochs": epochs, "training_rows": n_train, "runs": runs,
            "speedup_2_workers_over_1_by_classes": round(one["seconds_per_epoch"] / two["seconds_per_epoch"], 3),
            "speedup_by_classes_on_2_over_in_process": round(runs["none by rows"]["seconds_per_epoch"]
                                                             / two["seconds_per_epoch"], 3)}


def table(result: dict[str, Any]) -> str:
    """The results page's tables of a run: the step variants and, where it ran, the training runs."""
    shape = result["shape"]
    lines = [f"Step at C = {shape['classes']}, M = {shape['inducing']}, D = {shape['inputs']}, minibatch "
             f"{shape['batch']} ({result['steps_timed']} steps timed; load {result['load']['before'].split('average: ')[-1]} "
             "before):", "", "| step | median s | min s | array bytes per worker and step (sent / received) |",
             "|---|---|---|---|"]
    for name, run in result["variants"].items():
        traffic = run.get("array_bytes_per_worker_and_step")
        lines.append(f"| {name} | {run['median_s']} | {run['min_s']} | "
                     + (f"{traffic['sent']:,} / {traffic['received']:,} |" if traffic else "— |"))
    speedup = result["speedup_2_workers_over_1"]
    lines += ["", f"Two pinned workers over one, class-parallel: {speedup['min']}× by minima, {speedup['median']}× by "
              f"medians; the class-parallel variants' parameters are the same bits: "
              f"{'yes' if result['class_parallel_bits_agree'] else 'no'}."]
    train = result.get("train")
    if train:
        lines += ["", f"`pep train`'s path on Fashion-MNIST ({train['training_rows']:,} training rows, every test image, "
                  f"{train['epochs']} epoch{'s' if train['epochs'] > 1 else ''} per run, one run after the other):", "",
                  "| run | s, last epoch's training steps | s, first epoch's (compiling included) | wall s with "
                  "evaluations | test error | test NLL |", "|---|---|---|---|---|---|"]
        for name, run in train["runs"].items():
            lines.append(f"| {name} | {run['seconds_per_epoch']} | {run['first_epoch_seconds']} | "
                         f"{run['wall_seconds_with_evaluation']} | {run['test_error']:.4f} | {run['test_nll']:.4f} |")
        lines += ["", f"Two pinned workers over one by classes, last epoch: {train['speedup_2_workers_over_1_by_classes']}×; "
                  f"over the in-process row-parallel default: {train['speedup_by_classes_on_2_over_in_process']}×."]
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_class_parallel``."""
    parser = arguments(__doc__, steps=20, name="bench_class_parallel")
    parser.add_argument("--rows", type=int, default=2000, help="training rows of the synthetic store")
    parser.add_argument("--train-epochs", type=int, default=0, help="also train on Fashion-MNIST for this many epochs")
    parser.add_argument("--max-train-rows", type=int, default=None, help="Fashion-MNIST training rows kept")
    return parser


def main() -> None:
    args = cli().parse_args()
    result = run(args.rows, args.steps)
    if args.train_epochs:
        result["train"] = trained(args.train_epochs, args.max_train_rows)
    write_results(args.name, result)
    print(table(result))


if __name__ == "__main__":
    main()
