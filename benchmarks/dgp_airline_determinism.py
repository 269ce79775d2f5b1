"""``pep train --model deep-gp`` on the airline delays: in-process against 2 workers, and 2 workers killed
with SIGKILL after a checkpoint then ``--resume``d (issue 10).

Three real ``pep train`` runs of the same config on the store of ``pep ingest airline --target delay``:
``--cluster none``; ``--cluster local:2`` killed (the whole process group, SIGKILL) once its first
checkpoint is complete and resumed with ``--resume``. The final checkpoints' parameter digests (the
SHA-256 of every array, from their manifests) are compared and written to the JSON::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python -m benchmarks.dgp_airline_determinism --store delay.zarr
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import arguments, temporary_directory, write_results

PEP = Path(sys.executable).with_name("pep")


def final_digests(run_dir: Path) -> list[str]:
    """The SHA-256 of every parameter array of the run's newest checkpoint."""
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    return [leaf["sha256"] for leaf in json.loads((newest / "manifest.json").read_text())["leaves"]["params"]]


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.dgp_airline_determinism``."""
    parser = arguments(__doc__, name="dgp_airline_determinism")
    parser.add_argument("--store", required=True)
    parser.add_argument("--inducing", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--block-rows", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    return parser


def main(argv=None) -> dict:
    args = cli().parse_args(argv)
    with temporary_directory() as scratch:
        config = scratch / "dgp.toml"
        config.write_text(f"epochs = 1\nbatch_size = {args.batch_size}\nblock_rows = {args.block_rows}\n"
                          f"checkpoint_every = {args.checkpoint_every}\n[model]\nhidden_dims = [2]\nnum_inducing = {args.inducing}\n")
        train = lambda run, *extra: [str(PEP), "train", "--model", "deep-gp", "--data", args.store, "--run-dir",
                                     str(scratch / run), "--config", str(config), *extra]
        in_process = json.loads(subprocess.run(train("none", "--cluster", "none", "--json"), check=True,
                                               capture_output=True, text=True).stdout)
        killed = subprocess.Popen(train("two", "--cluster", "local:2", "--quiet"), start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not list((scratch / "two" / "checkpoints").glob("step-*/manifest.json")):
            if killed.poll() is not None:
                raise RuntimeError("the 2-worker run ended before its first checkpoint")
            time.sleep(0.5)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        killed_at = sorted((scratch / "two" / "checkpoints").glob("step-*"))[-1].name
        resumed = json.loads(subprocess.run(train("two", "--cluster", "local:2", "--resume", "--json"), check=True,
                                            capture_output=True, text=True).stdout)
        reference, other = final_digests(scratch / "none"), final_digests(scratch / "two")
    results = {"settings": vars(args), "killed_after": killed_at, "steps": [in_process["steps"], resumed["steps"]],
               "in_process": {k: in_process[k] for k in ("rmse", "test_nll", "seconds")},
               "two_workers_resumed": {k: resumed[k] for k in ("rmse", "test_nll", "seconds")},
               "parameter_arrays": len(reference), "bit_identical": reference == other}
    write_results(args.name, results)
    return results


if __name__ == "__main__":
    main()
