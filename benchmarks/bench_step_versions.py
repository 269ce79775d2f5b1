"""One training step of two versions of pep, side by side in one run: how much one change buys.

Each revision is checked out into a temporary git worktree; a fresh process per revision and round imports
pep from that worktree, builds the trainer ``pep train`` runs (``multiclass-sep`` at the paper's
Fashion-MNIST settings, :data:`benchmarks.bench_fashion_mnist.PAPER_MNIST`, in-process), takes
``--warm-up`` steps and then times ``--steps`` more (each ``Trainer.step`` waits for its result: it reads
the energy). Rounds alternate between the revisions (A, B, A, B, …) so that a change in the machine's
load falls on both; the result is each revision's median step over all its rounds and B's median over A's.
The energies of the timed steps are reported too: a change that must not move the trajectory shows the
same numbers. Beside the timings, XLA's own cost analysis of each of the step's compiled programs (flops
and bytes accessed, summed per step with one block per step): deterministic, whatever the machine's load.

Usage::

    .venv/bin/python -m benchmarks.bench_step_versions REV_A REV_B [--store fmnist.zarr] [--rounds 3]
        [--steps 20] [--batch-size 200] [--kernel-products float32] [--name NAME]

Writes ``benchmarks/results/NAME.json`` (default ``step_versions``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks._common import arguments, temporary_directory, write_results

ROOT = Path(__file__).resolve().parents[1]
LEGACY_PACKAGES = {"pep_gp": "pep_gp", "pep_gp.core": "pepcore", "pep_gp.pipeline": "pipeline", "pep_gp.flows": "flows"}
"""Revisions before the ``src/`` layout mapped these folders onto the import root; later ones keep the whole
package in ``src/pep_gp`` (an empty map: ``src`` goes first on the path)."""

CHILD = """
import importlib.util, json, sys, time
tree, store, steps, warm_up, batch, products = sys.argv[1:7]
sys.path.insert(0, f"{{tree}}/src")  # pep from that worktree, not the installed one
for name, folder in {packages}.items():
    spec = importlib.util.spec_from_file_location(name, f"{{tree}}/{{folder}}/__init__.py",
                                                  submodule_search_locations=[f"{{tree}}/{{folder}}"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if "." in name:
        setattr(sys.modules["pep_gp"], name.split(".")[1], module)
sys.path.insert(0, tree)
from jax._src import compiler  # XLA's own count of each compiled program's flops and bytes
costs, compile_or_get_cached = {{}}, compiler.compile_or_get_cached
def recording(backend, computation, *args, **kwargs):
    executable = compile_or_get_cached(backend, computation, *args, **kwargs)
    name = str(computation.operation.attributes["sym_name"]).strip('"')
    try:
        analysis = executable.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, list) else analysis
        costs[name] = {{"flops": analysis.get("flops", 0.0), "bytes": analysis.get("bytes accessed", 0.0)}}
    except Exception:
        pass
    return executable
compiler.compile_or_get_cached = recording
from benchmarks.bench_fashion_mnist import PAPER_MNIST
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.threads import compute_threads
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
config = PAPER_MNIST.model_copy(update={{"epochs": 1, "batch_size": int(batch), "block_rows": int(batch),
                                        "model": {{**PAPER_MNIST.model, "kernel_products": products}}}})
trainer = Trainer(TrainJob("multiclass-sep", open_store(store), config, None), InProcess())
times, energies = [], []
with compute_threads():
    state = trainer.fresh_state()
    for step in range(int(warm_up) + int(steps)):
        started = time.perf_counter()
        trainer.step(state)
        if step >= int(warm_up):
            times.append(time.perf_counter() - started)
            energies.append(state.last_energy)
# one block per step: each of the step's programs runs once (the block functions' names end in "term")
step_programs = {{name: cost for name, cost in costs.items()
                 if name.endswith(("prepare", "site_update", "ascend", "term"))}}
print(json.dumps({{"seconds": times, "energies": energies, "programs": step_programs}}))
"""


def worktree(revision: str, directory: Path) -> Path:
    """``revision`` checked out (detached) into ``directory``."""
    subprocess.run(["git", "worktree", "add", "--detach", str(directory), revision], cwd=ROOT, check=True,
                   capture_output=True)
    return directory


def run_round(tree: Path, args: argparse.Namespace) -> dict:
    code = CHILD.format(packages={} if (tree / "src" / "pep_gp").is_dir() else LEGACY_PACKAGES)
    done = subprocess.run([sys.executable, "-c", code, str(tree), str(args.store), str(args.steps),
                           str(args.warm_up), str(args.batch_size), args.kernel_products],
                          cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_step_versions``."""
    parser = arguments(__doc__, steps=20, name="step_versions")
    parser.add_argument("revisions", nargs=2, metavar="REV")
    parser.add_argument("--store", type=Path, required=True, help="a `pep ingest mnist` store")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm-up", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--kernel-products", default="float32")
    return parser


def main() -> None:
    args = cli().parse_args()

    commits = [subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip() for rev in args.revisions]
    runs: dict[str, dict] = {commit: {"seconds": [], "energies": [], "programs": {}} for commit in commits}
    with temporary_directory(prefix="pep-versions-") as work:
        trees = [worktree(commit, work / commit) for commit in commits]
        try:
            for round_ in range(args.rounds):
                for commit, tree in zip(commits, trees):
                    result = run_round(tree, args)
                    runs[commit]["seconds"] += result["seconds"]
                    runs[commit]["energies"] = result["energies"]
                    runs[commit]["programs"] = result["programs"]
                    print(commit, round_, round(1e3 * float(np.median(result["seconds"])), 1), "ms", flush=True)
        finally:
            for tree in trees:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    medians = {commit: round(1e3 * float(np.median(run["seconds"])), 2) for commit, run in runs.items()}
    git = lambda *words: subprocess.run(["git", *words], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    write_results(args.name, {
        # the tree (the code itself) as well as the commit: a reworded commit keeps its tree
        "revisions": {commit: {"subject": git("log", "-1", "--format=%s", commit)[:120], "tree": git("rev-parse", f"{commit}^{{tree}}")}
                      for commit in commits},
        "settings": {"model": "multiclass-sep", "config": "PAPER_MNIST", "batch_size": args.batch_size,
                     "kernel_products": args.kernel_products, "rounds": args.rounds, "steps_per_round": args.steps,
                     "warm_up": args.warm_up, "pep_compilation_cache": os.environ.get("PEP_COMPILATION_CACHE", "default")},
        "median_step_ms": medians,
        "b_over_a": round(medians[commits[1]] / medians[commits[0]], 3),
        # XLA's cost analysis of the step's programs (deterministic, whatever the machine's load)
        "xla_gflop_per_step": {commit: round(sum(c["flops"] for c in run["programs"].values()) / 1e9, 3)
                               for commit, run in runs.items()},
        "xla_gbytes_accessed_per_step": {commit: round(sum(c["bytes"] for c in run["programs"].values()) / 1e9, 3)
                                         for commit, run in runs.items()},
        "xla_programs": {commit: run["programs"] for commit, run in runs.items()},
        "energies_of_last_round": {commit: run["energies"] for commit, run in runs.items()},
    })


if __name__ == "__main__":
    main()
