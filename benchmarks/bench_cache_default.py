"""The persistent compilation cache on by default (issue 63, item 4): what a second process gains, and a
long session compiling many programs with the cache on.

``fits``: three fresh processes, one after the other, each fit ``SparseGPClassifier()`` at its defaults on the
same 1,000-row table and report the seconds from their own start (interpreter and imports included) to a
fitted model, the programs they loaded from the cache and a digest of the fitted parameters: without the
cache (``PEP_COMPILATION_CACHE=off``), with an empty cache directory, and with it filled.

``limit`` (``--limit``, alone): a fresh process taken to 600 mappings short of ``vm.max_map_count`` compiles
distinct programs until it ends, once with the cache and once without: how it ended (exit code -11: killed by
a segmentation fault) and after how many programs.

``stress``: two processes share one cache directory and compile distinct programs (``--program``: a Cholesky, a
triangular solve and their gradient, or a small elementwise program, for ever new sizes) for ``--seconds``, every
program written (no minimum compile time or size), beside a third without the cache; each reports its programs,
cache hits and memory mappings (``/proc/self/maps``; Linux ends a process whose mappings reach
``vm.max_map_count``).

Usage::

    .venv/bin/python -m benchmarks.bench_cache_default [--seconds 180] [--program cholesky|small] [--name bench_cache_default]
    .venv/bin/python -m benchmarks.bench_cache_default --limit --name bench_cache_limit

Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import arguments, bytecode_compiled, temporary_directory, write_results

ROOT = Path(__file__).resolve().parents[1]


def fit_child() -> None:
    """Fit the default classifier in this fresh process and print what the parent records, as JSON."""
    import jax.monitoring
    import numpy as np
    import psutil

    from pep_gp import SparseGPClassifier

    hits: list[str] = []
    jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 4))
    y = (np.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * rng.normal(size=1000) > 0).astype(int)
    model = SparseGPClassifier().fit(x, y)
    seconds = time.time() - psutil.Process().create_time()
    digest = hashlib.sha256(b"".join(np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(model.params_)))
    print(json.dumps({"seconds_from_process_start_to_fitted": round(seconds, 2), "steps": int(model.n_iter_),
                      "programs_loaded_from_cache": len(hits), "params_sha256": digest.hexdigest()}))


def stress_child(cache: str, seconds: float, kind: str) -> None:
    """Compile distinct programs for ``seconds`` with the cache at ``cache`` (``off``: none); print JSON.
    ``kind``: ``cholesky`` (a Cholesky, a triangular solve and their gradient) or ``small`` (an elementwise
    product and a sum: many more programs in the time)."""
    import jax
    import jax.monitoring
    import jax.numpy as jnp
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_x64", True)
    if cache != "off":
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.config.update("jax_compilation_cache_max_size", 2 * 2**30)
        compilation_cache.set_cache_dir(cache)
    hits: list[str] = []
    jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)

    def mappings() -> int:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)

    def program(n: int, k: int):
        if kind == "small":
            return jax.jit(lambda a, x: (jnp.sum(jnp.sin(x * k) * a), x))

        def energy(a, x):
            gram = jnp.exp(-0.5 * (x[:, None] - x[None]) ** 2 / a) + (1.0 + k) * jnp.eye(n)
            lower = jnp.linalg.cholesky(gram)
            v = jax.scipy.linalg.solve_triangular(lower, jnp.sin(x * k), lower=True)
            return jnp.sum(jnp.log(jnp.diagonal(lower))) + 0.5 * v @ v
        return jax.jit(jax.value_and_grad(energy))

    start, programs, before, n = time.time(), 0, mappings(), 4
    while time.time() - start < seconds:
        for k in range(3):
            program(n, k)(1.3, jnp.linspace(0, 1, n))[0].block_until_ready()
            programs += 1
        n += 1
    print(json.dumps({"programs": programs, "cache_hits": len(hits), "mappings_at_start": before,
                      "mappings_at_end": mappings(), "mappings_per_program": round((mappings() - before) / programs, 2)}))


def limit_child(cache: str, free: int) -> None:
    """Take this process to ``free`` mappings short of ``vm.max_map_count`` (every other page of one anonymous
    region made read-only: two mappings each), then compile distinct programs with the cache at ``cache``
    (``off``: none), printing the count as it goes, until Linux refuses a mapping."""
    import ctypes
    import mmap

    import jax
    import jax.numpy as jnp
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_x64", True)
    if cache != "off":
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.set_cache_dir(cache)
    jnp.ones(3).block_until_ready()

    def mappings() -> int:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    split = (int(Path("/proc/sys/vm/max_map_count").read_text()) - free - mappings()) // 2
    base = libc.mmap(None, (2 * split + 2) * mmap.PAGESIZE, 3, 0x22, -1, 0)  # read/write, private anonymous
    for i in range(1, 2 * split, 2):
        libc.mprotect(base + i * mmap.PAGESIZE, mmap.PAGESIZE, 1)
    print(json.dumps({"mappings_before_compiling": mappings()}), flush=True)
    for n in range(4, 100_000):
        jax.jit(lambda x: jnp.linalg.cholesky(x @ x.T + n * jnp.eye(x.shape[0])))(jnp.ones((n, n))).block_until_ready()
        print(json.dumps({"programs": n - 3, "mappings": mappings()}), flush=True)


def at_the_limit(cache: str, free: int) -> dict:
    """:func:`limit_child` in a fresh process: how it ended, after how many programs, and XLA's last words."""
    env = {**os.environ, "PEP_COMPILATION_CACHE": "off"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_cache_default", "--limit-child", cache, str(free)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    last = lines[-1] if len(lines) > 1 else {}
    return {"exit_code": done.returncode, "mappings_before_compiling": lines[0]["mappings_before_compiling"],
            "programs_before_the_end": last.get("programs", 0), "mappings_at_the_end": last.get("mappings"),
            "stderr_tail": [line for line in done.stderr.splitlines() if "rror" in line][-2:]}


def run(args: list[str], cache: str | None = None, wait: bool = True):
    env = {**os.environ, **({"PEP_COMPILATION_CACHE": cache} if cache else {})}
    started = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_cache_default", *args], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(started) if wait else started


def finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        return {"exit_code": process.returncode, "stderr": err[-2000:]}
    return json.loads(out.strip().splitlines()[-1])


def cli() -> argparse.ArgumentParser:
    parser = arguments(__doc__, name="bench_cache_default")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--fit-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stress-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--program", choices=("cholesky", "small"), default="cholesky",
                        help="the stress's programs (see stress_child)")
    parser.add_argument("--limit", action="store_true",
                        help="only the mapping-limit experiment: a process 600 mappings short of vm.max_map_count "
                             "compiles until it ends, with the cache and without")
    parser.add_argument("--limit-child", nargs=2, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.fit_child:
        return fit_child()
    if args.stress_child:
        return stress_child(args.stress_child[0], float(args.stress_child[1]), args.stress_child[2])
    if args.limit_child:
        return limit_child(args.limit_child[0], int(args.limit_child[1]))
    if args.limit:
        with temporary_directory("pep-bench-cache-") as work:
            write_results(args.name, {"free_mappings_at_start": 600, "runs": {
                "with the cache": at_the_limit(str(work / "limit"), 600), "no cache": at_the_limit("off", 600)},
                "vm_max_map_count": int(Path("/proc/sys/vm/max_map_count").read_text())})
        return
    bytecode_compiled(sys.executable)  # the processes time their imports as a user's install leaves them
    with temporary_directory("pep-bench-cache-") as work:
        cache = str(work / "fits")
        fits = {"no cache (PEP_COMPILATION_CACHE=off)": run(["--fit-child"], "off"),
                "first process (empty cache)": run(["--fit-child"], cache),
                "second process (cache filled)": run(["--fit-child"], cache)}
        print(fits, flush=True)
        shared = str(work / "stress")
        stress = [run(["--stress-child", shared, str(args.seconds), args.program], wait=False) for _ in range(2)]
        stress.append(run(["--stress-child", "off", str(args.seconds), args.program], wait=False))
        stress = dict(zip(("writer 1 (shared cache)", "writer 2 (shared cache)", "no cache"), map(finish, stress)))
        stress_files = sum(1 for f in Path(shared).rglob("*") if f.is_file())
    first, second = fits["first process (empty cache)"], fits["second process (cache filled)"]
    write_results(args.name, {
        "fits": fits, "fit": "SparseGPClassifier() on 1,000 rows of 4 features",
        "first_over_second_process": round(first["seconds_from_process_start_to_fitted"]
                                           / second["seconds_from_process_start_to_fitted"], 2),
        "params_bit_identical": len({run["params_sha256"] for run in fits.values()}) == 1,
        "stress": stress, "stress_program": args.program, "stress_seconds": args.seconds,
        "stress_cache_files": stress_files,
        "vm_max_map_count": int(Path("/proc/sys/vm/max_map_count").read_text())})


if __name__ == "__main__":
    main()
