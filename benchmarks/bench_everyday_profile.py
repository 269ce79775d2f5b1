"""Where the time goes of the defaults that miss issue 63's seconds: each one's training step on an everyday table,
by compiled program and by kind of XLA operation (JAX's profiler), beside the steps its default fit takes.

The everyday run (:mod:`benchmarks.bench_everyday`) says how long a default fit takes; this says what its steps
spend it on. Each ``ESTIMATOR:TABLE`` pair runs in a fresh process on the everyday split, at the estimator's
defaults but ``max_iter``: a fit of ``--steps`` steps compiles the programs (the untied classifier compiles one
per window of 25 steps), then fits of ``--steps`` and twice ``--steps`` steps are timed (their difference over
``--steps`` is the wall time of a step), and the longer fit runs again under ``jax.profiler.trace`` (no Python
tracing). From the trace: every XLA operation's exclusive time (a loop's or a conditional's own time without the
operations of its body), summed over XLA's threads, by program and by kind (:func:`kind_of`), per step. The steps a
default fit takes come from the committed everyday runs (``bench_everyday``, ``bench_everyday_slow``).

Usage (in a venv with the ``bench`` extra)::

    python -m benchmarks.bench_everyday_profile [--pairs DeepGPClassifier:breast-cancer ...] [--steps 50]
        [--timeout 900] [--name bench_everyday_profile]

Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ._common import arguments, temporary_directory, uptime, write_results
from .bench_everyday import ROOT, gflops, load_table

PAIRS = ["DeepGPClassifier:breast-cancer", "DeepGPRegressor:concrete", "MultiClassDeepGPClassifier:glass",
         "MultiClassEPClassifier:glass", "MultiClassEPClassifier:satellite-3", "MultiClassGPClassifier:digits",
         "DirectMultiClassGPClassifier:digits", "MultiClassGPClassifier:satellite-3"]
"""The defaults outside the issue's 20 s from a fresh process or 5 s from a second one (or 2× / 1× GPyTorch's time)
in the everyday runs of 12-05."""
EVERYDAY_RUNS = ("bench_everyday", "bench_everyday_slow")
KINDS = {"matrix products": ("dot", "ynn_fusion", "convolution"),
         "factorisations and triangular solves": ("cholesky", "triangular_solve", "custom-call", "custom_call"),
         "loops and conditionals (own time)": ("while", "conditional", "cond", "call")}
TRANSCENDENTAL = ("exponential", "log", "erf", "power", "sqrt", "tanh", "divide")
TRANSCENDENTAL_KIND = "elementwise with exponentials, logs, divisions"
OTHER_KIND = "other elementwise, copies, reductions"
ALL_KINDS = (*KINDS, TRANSCENDENTAL_KIND, OTHER_KIND)
TOP_OPERATIONS = 6


def kind_of(op: str) -> str:
    """The kind of an XLA operation by its name in the optimised program (``ynn_fusion.3``: a matrix product by
    YNNPACK with the elementwise work fused into it; ``multiply_exponential_fusion``: elementwise work with an
    exponential)."""
    base = op.split(".")[0]
    for kind, prefixes in KINDS.items():
        if base.startswith(prefixes):
            return kind
    return TRANSCENDENTAL_KIND if any(word in base for word in TRANSCENDENTAL) else OTHER_KIND


def exclusive_times(events: list[dict]) -> list[tuple[str, str, float]]:
    """``(program, operation, µs)`` of each XLA operation event less the events nested in it on its thread (a
    ``while``'s body runs inside the ``while``'s own event)."""
    by_thread = collections.defaultdict(list)
    for event in events:
        by_thread[event["tid"]].append(event)
    times = []
    for thread in by_thread.values():
        thread.sort(key=lambda event: (event["ts"], -event["dur"]))
        stack: list[list] = []  # [end, own µs, program, operation] of the events still open
        for event in thread:
            while stack and event["ts"] >= stack[-1][0]:
                times.append(stack.pop()[1:])
            if stack:
                stack[-1][1] -= event["dur"]
            stack.append([event["ts"] + event["dur"], event["dur"], event["args"]["hlo_module"], event["args"]["hlo_op"]])
        times.extend(entry[1:] for entry in stack)
    return [(program, op, own) for own, program, op in times]


def profile(trace_dir: Path, steps: int, dumps: Path) -> dict:
    """Milliseconds per step, summed over XLA's threads, by program and by kind, and the largest operations with
    their output shapes and what they compute (from XLA's dumps of the optimised programs in ``dumps``), from the
    perfetto trace in ``trace_dir``."""
    path = max(trace_dir.rglob("*.trace.json.gz"))
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    ops = [event for event in events if event.get("ph") == "X" and "hlo_module" in event.get("args", {})]
    programs, kinds, top = collections.Counter(), collections.Counter(), collections.Counter()
    for program, op, own in exclusive_times(ops):
        programs[program.removeprefix("jit_")] += own
        kinds[kind_of(op)] += own
        top[(program, op)] += own
    return {"xla_ms_per_step": round(sum(programs.values()) / 1e3 / steps, 2),
            "programs_ms_per_step": {name: round(total / 1e3 / steps, 2) for name, total in programs.most_common()},
            "kinds_ms_per_step": {name: round(total / 1e3 / steps, 2) for name, total in kinds.most_common()},
            "top_operations": [{"program": program.removeprefix("jit_"), "operation": op,
                                "ms_per_step": round(total / 1e3 / steps, 2), **described(dumps, program, op)}
                               for (program, op), total in top.most_common(TOP_OPERATIONS)]}


def described(dumps: Path, program: str, op: str) -> dict:
    """The output shape of operation ``op`` in XLA's dump of the optimised ``program`` and the JAX operation it
    came from (the last two parts of its ``op_name``): the first program of that name that has it."""
    line = re.compile(rf"^\s*(?:ROOT )?%?{re.escape(op)} = (\([^)]*\)|\S+)(.*)$", re.M)
    for path in sorted(dumps.glob(f"*.{program}.cpu_after_optimizations.txt")):
        match = line.search(path.read_text())
        if match:
            origin = re.search(r'op_name="([^"]*)"', match.group(2))
            return {"shape": re.sub(r"\{[^}]*\}", "", match.group(1)),
                    "from": "/".join(origin.group(1).split("/")[-2:]) if origin else ""}
    return {}


def child(pair: str, steps: int, out: Path) -> None:
    """Profile ``pair`` in this process (module docstring); print one JSON line."""
    import jax

    import pep_gp

    estimator, table = pair.split(":")
    x_train, y_train, _, _, _ = load_table(table)
    cls = getattr(pep_gp, estimator)
    cls(max_iter=steps).fit(x_train, y_train)
    seconds = {}
    for count in (steps, 2 * steps):
        started = time.perf_counter()
        fitted = cls(max_iter=count).fit(x_train, y_train)
        seconds[count] = time.perf_counter() - started
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(str(out), create_perfetto_trace=True, profiler_options=options):
        cls(max_iter=2 * steps).fit(x_train, y_train)
    step = (seconds[2 * steps] - seconds[steps]) / steps
    print(json.dumps({"steps_profiled": int(fitted.n_iter_), "train_rows": len(x_train), "features": x_train.shape[1],
                      "step_ms": round(1e3 * step, 2),
                      **profile(out, 2 * steps, out / "hlo")}))


def default_fit(pair: str) -> dict:
    """The default fit of ``pair`` in the committed everyday runs: steps and seconds, fresh and second process."""
    estimator, table = pair.split(":")
    for name in EVERYDAY_RUNS:
        run = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
        record = run["tables"].get(table, {}).get("fits", {}).get(estimator)
        if record:
            first, second = record["first_process"], record.get("second_process", {})
            return {"run": name, "commit": run["commit"][:7], "steps": first.get("steps"),
                    "fresh_seconds": first.get("seconds_to_fitted"), "second_seconds": second.get("seconds_to_fitted"),
                    "ended": first.get("ended")}
    return {}


def table(result: dict) -> str:
    """Markdown: a row per pair (the default fit's steps and seconds, a step's wall time, and the XLA time of a
    step by kind, the largest programs)."""
    kinds = ALL_KINDS
    lines = ["| fit, table | default fit: steps, fresh / second process s | step, ms | XLA ms per step "
             "(summed over threads) | " + " | ".join(kinds) + " | largest programs, ms per step | largest operations: "
             "output, from, ms per step |", "|---|---|---|---|" + "---|" * len(kinds) + "---|---|"]
    for pair, record in result["pairs"].items():
        if "step_ms" not in record:
            lines.append(f"| {pair.replace(':', ', ')} | {record.get('ended', '')} |" + " |" * (len(kinds) + 4))
            continue
        fit = record["default_fit"]
        seconds = fit.get("ended") or f"{fit.get('steps')}: {fit.get('fresh_seconds')} / {fit.get('second_seconds')}"
        shares = [f"{100 * record['kinds_ms_per_step'].get(kind, 0.0) / record['xla_ms_per_step']:.0f} %" for kind in kinds]
        largest = ", ".join(f"{name} {ms}" for name, ms in list(record["programs_ms_per_step"].items())[:3])
        lines.append(f"| {pair.replace(':', ', ')} | {seconds} | {record['step_ms']} | "
                     f"{record['xla_ms_per_step']} | " + " | ".join(shares) + f" | {largest} | {operations(record)} |")
    return "\n".join(lines)


def operations(record: dict, count: int = 3) -> str:
    """The ``count`` largest operations of a pair: output shape, the JAX operation, ms per step."""
    return "; ".join(f"`{op.get('shape', op['operation'])}` {op.get('from') or op['operation']} {op['ms_per_step']}"
                     for op in record["top_operations"][:count])


def cli() -> argparse.ArgumentParser:
    parser = arguments(__doc__, name="bench_everyday_profile", steps=50)
    parser.add_argument("--pairs", nargs="+", default=PAIRS, help="ESTIMATOR:TABLE pairs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a pair's process may take")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), Path(args.child[2]))
    result: dict = {"gflops_float64": gflops(), "load_at_start": uptime(), "steps": args.steps, "pairs": {}}
    with temporary_directory("pep-bench-profile-") as work:
        for index, pair in enumerate(args.pairs):
            env = {**os.environ, "PEP_COMPILATION_CACHE": str(work / f"cache-{index}"),
                   "XLA_FLAGS": f"--xla_dump_to={work / f'trace-{index}' / 'hlo'}"}
            command = [sys.executable, "-m", "benchmarks.bench_everyday_profile", "--child", pair, str(args.steps),
                       str(work / f"trace-{index}")]
            try:
                done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
                record = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                          else {"ended": f"exit code {done.returncode}", "stderr": done.stderr[-1500:]})
            except subprocess.TimeoutExpired:
                record = {"ended": f"stopped after the {args.timeout:.0f} s timeout"}
            result["pairs"][pair] = {**record, "default_fit": default_fit(pair)}
            print(pair, json.dumps(result["pairs"][pair]), flush=True)
    result["load_at_end"] = uptime()
    write_results(args.name, result)
    print(table(result))


if __name__ == "__main__":
    main()
