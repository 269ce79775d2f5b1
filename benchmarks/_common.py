"""The benchmarks' harness: one argument parser, temporary directories, timing, the machine and its load,
and one JSON writer under ``benchmarks/results/`` that records how each result was made.

Every results JSON starts with the command that wrote it (``python -m benchmarks.X args…``), the git commit
of the code it ran (``dirty``: whether tracked files other than the results differed from that commit), the
date (UTC) and the machine (versions, devices, cores, CPU model and the load average when written: the
machine is shared), so that every committed number can be regenerated (issue 62) and
``tests/test_benchmark_results.py`` can check that each one says how.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("PEP_BENCH_RESULTS") or ROOT / "benchmarks" / "results")
"""Where results are read and written: the committed ``benchmarks/results/``, or ``$PEP_BENCH_RESULTS``
(:mod:`benchmarks.verify` re-runs a benchmark into a temporary directory so)."""


def arguments(doc: str, *, name: str | None = None, repeats: int | None = None, steps: int | None = None,
              splits: int | None = None, cluster: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's argument parser: its module docstring as the description (kept as written), and each
    common flag whose default is given: ``--name`` (the results file ``results/NAME.json``), ``--repeats``,
    ``--steps``, ``--splits`` and ``--cluster`` (pep's backend)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = {"name": (str, name, "results/NAME.json"), "repeats": (int, repeats, "timed repeats"),
              "steps": (int, steps, "steps to run (or to time)"), "splits": (int, splits, "random train/test splits"),
              "cluster": (str, cluster, "pep's backend: none (in-process), local:N[:pinned] or tcp://HOST:PORT")}
    for flag, (kind, default, meaning) in common.items():
        if default is not None:
            parser.add_argument(f"--{flag}", type=kind, default=default, help=f"{meaning} (default: %(default)s)")
    return parser


@contextmanager
def temporary_directory(prefix: str = "pep-bench-") -> Iterator[Path]:
    """A temporary directory, removed on exit (stores, run directories and outputs of one benchmark run)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        yield Path(work)


class Stopwatch:
    """Wall seconds of a ``with`` block: ``with Stopwatch() as clock: …`` then ``clock.seconds``."""

    seconds: float = float("nan")

    def __enter__(self) -> "Stopwatch":
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._started


def bytecode_compiled(python: str) -> None:
    """Compile ``python``'s installed modules and pep's sources to bytecode, as ``pip install`` and a first import
    leave them for a user: where ``PYTHONDONTWRITEBYTECODE`` is set (some sandboxes and containers set it) and
    nothing was compiled, every fit's process compiled the source of every module it imported (4.3 s of a
    ``pep evaluate``'s 8.6 s, measured on 12-04), GPyTorch's fits more than pep's."""
    script = "import compileall, site; [compileall.compile_dir(d, quiet=2, workers=0) for d in site.getsitepackages()]"
    subprocess.run([python, "-c", script], capture_output=True)
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(ROOT / "src")], capture_output=True)


def best_time(fn, repeats: int) -> float:
    """Minimum wall time of ``fn()`` (blocking on JAX results) over ``repeats`` calls after one warm-up.

    The minimum is the least noisy statistic on a shared machine: interference only adds time.
    """
    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def train_exact_gpytorch(model, x, y, steps: int = 50, learning_rate: float = 0.1):
    """A GPyTorch exact GP trained as its tutorials do: Adam on the negative exact marginal log likelihood of
    ``(x, y)`` for ``steps`` iterations; returns ``model`` in eval mode."""
    import gpytorch
    import torch

    model.train()
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    for _ in range(steps):
        optimiser.zero_grad()
        (-mll(model(x), y)).backward()
        optimiser.step()
    return model.eval()


def standard_error(values) -> float:
    """Standard error of the mean of ``values`` (sample deviation / √n); NaN for fewer than two values."""
    values = np.asarray(values, float)
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")


def two_se_sign(difference: float, se: float) -> int:
    """+1 (−1) where ``difference`` lies more than two standard errors above (below) zero, 0 within."""
    return 1 if difference > 2 * se else -1 if difference < -2 * se else 0


def loglog_slope(sizes, seconds) -> float:
    """Least-squares exponent ``p`` in ``seconds ∝ size^p``."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


def socket_bytes(pid: int) -> int | None:
    """Bytes sent plus bytes received so far over the open TCP connections of process ``pid`` (Linux,
    from ``ss -tinp``: the kernel's counters, so every message and frame on the wire counts); None where
    ``ss`` is not installed."""
    if shutil.which("ss") is None:
        return None
    lines = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    total, ours = 0, False
    for line in lines:
        if not line[:1].isspace():  # a connection's first line names its process
            ours = f"pid={pid}," in line
        elif ours:
            total += sum(int(n) for n in re.findall(r"\bbytes_(?:sent|received):(\d+)", line))
    return total


def uptime() -> str:
    """``uptime``'s line: the clock, how long the machine has been up and its load averages."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_model() -> str | None:
    """The CPU's model name (Linux's ``/proc/cpuinfo``), None where it is not known."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return found.group(1).strip() if found else platform.processor() or None


def machine() -> dict:
    """Where a result was measured: Python and JAX versions, JAX's devices, the cores this process may use
    of all the machine's, the CPU model, the platform and the load average (1, 5, 15 minutes) now."""
    import jax  # here, not at the top: a benchmark's child processes import the harness for its parser only

    return {"python": platform.python_version(), "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()], "cpus": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_model": cpu_model(), "platform": platform.platform(),
            "load_avg": [round(load, 2) for load in os.getloadavg()]}


def command() -> str:
    """The command line of this process as ``python -m MODULE ARGS…`` (the module that runs as ``__main__``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = spec.name if spec is not None else f"benchmarks.{Path(sys.argv[0]).stem}"
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def provenance() -> dict:
    """How a result was made: :func:`command`, the git commit checked out (None outside a git checkout),
    whether tracked files other than ``benchmarks/results/`` differ from it, and the date (UTC)."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return {"command": command(), "commit": commit.strip() if commit else None,
            "dirty": None if status is None else bool(status.strip()),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def read_results(name: str) -> dict:
    """The committed ``benchmarks/results/<name>.json`` (:func:`write_results`'), or ``{}`` when there is none."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_json(path: Path, payload: dict, echo: bool = False) -> Path:
    """Write ``payload`` to ``path`` as strict JSON (a non-finite number is null) after :func:`provenance`
    and :func:`machine` (facts the payload gives under ``machine`` are kept beside them; a payload's own
    ``command``, e.g. bench_qp's normalised one that its ``--continue`` compares, replaces this process's);
    print it if ``echo``."""
    from pep_gp.pipeline.jsonio import dumps

    payload = dict(payload)
    payload = {**provenance(), "machine": {**machine(), **payload.pop("machine", {})}, **payload}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(payload, indent=2)
    path.write_text(text + "\n")
    if echo:
        print(text)
    return path


def write_results(name: str, payload: dict, echo: bool = True) -> Path:
    """:func:`write_json` to ``benchmarks/results/<name>.json``, printed unless ``echo`` is False."""
    return write_json(RESULTS / f"{name}.json", payload, echo)
