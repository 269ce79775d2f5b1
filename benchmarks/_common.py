"""Helpers shared by the benchmarks: timing and JSON results under ``benchmarks/results/``."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

import jax
import numpy as np

from pep_gp.pipeline.jsonio import dumps

RESULTS = Path(__file__).resolve().parent / "results"


def best_time(fn, repeats: int) -> float:
    """Minimum wall time of ``fn()`` (blocking on JAX results) over ``repeats`` calls after one warm-up.

    The minimum is the least noisy statistic on a shared machine: interference only adds time.
    """
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


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


def read_results(name: str) -> dict:
    """The committed ``benchmarks/results/<name>.json`` (:func:`write_results`'), or ``{}`` when there is none."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_results(name: str, payload: dict, echo: bool = True) -> Path:
    """Write ``payload`` (plus machine facts: versions, devices, cores and the load average when written,
    the machine being shared) to ``benchmarks/results/<name>.json`` and print it (unless ``echo`` is False)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": {"python": platform.python_version(), "jax": jax.__version__,
                           "devices": [str(d) for d in jax.devices()], "cpus": os.cpu_count(),
                           "load_avg": [round(load, 2) for load in os.getloadavg()]}, **payload}
    path = RESULTS / f"{name}.json"
    text = dumps(payload, indent=2)  # strict JSON: a non-finite number (one split's s.e.) is null
    path.write_text(text)
    if echo:
        print(text)
    return path
