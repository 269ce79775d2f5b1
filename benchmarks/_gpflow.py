"""GPflow beside pep in one benchmark run: GPflow (TensorFlow) lives in a Python of its own (``--gpflow-python``),
so a benchmark writes each split to an ``.npz`` file, runs its own module with ``--gpflow-worker PATH`` in that
Python, and reads the worker's results from ``PATH.out.npz``."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def add_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--gpflow-python`` (the Python that runs GPflow) and the hidden ``--gpflow-worker PATH`` of the child."""
    parser.add_argument("--gpflow-python", default=None, help="a Python with gpflow and tensorflow (default: none, "
                        "GPflow not run)")
    parser.add_argument("--gpflow-worker", default=None, help=argparse.SUPPRESS)  # the child process's split
    return parser


def run_worker(python: str, module: str, path: Path, **split) -> np.lib.npyio.NpzFile:
    """Save ``split`` to ``path``, run ``python -m module --gpflow-worker path`` from the repository root and
    return what the worker saved beside it; a failed worker raises with the end of its standard error."""
    np.savez(path, **split)
    done = subprocess.run([python, "-m", module, "--gpflow-worker", str(path)], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the GPflow process failed: {done.stderr[-2000:]}")
    return np.load(path.with_suffix(".out.npz"))


def version(python: str) -> str | None:
    """``"GPFLOW TENSORFLOW"`` versions in ``python``, or None where it cannot import them."""
    done = subprocess.run([python, "-c", "import gpflow, tensorflow as tf; print(gpflow.__version__, tf.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None
