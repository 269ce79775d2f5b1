"""Reproduction of Villacampa-Calvo & Hernández-Lobato 2017, §4.1 (Tables 2–3) on its own data sets: EP and SEP, M = 5/10/20 % of N.

Protocol (Villacampa-Calvo & Hernández-Lobato 2017, §4.1 and Table 1): random stratified train/test splits
(so every split has the same class counts; features standardised on the training split) — 90/10 but for
Satellite (20 % train / 80 % test, "fairly big") and Waveform (1,000 rows generated once, ``seed=0``, split
30/70); Vowel keeps its first 6 classes (540 rows). Batch training for 250 iterations, each a damped parallel
factor update then one Adam step on the hyper-parameters and inducing inputs (EP:
:class:`pep_gp.MultiClassEPClassifier`, one factor per row; SEP: :class:`pep_gp.MultiClassGPClassifier`,
one tied factor per class; the paper used its App. G adaptive step instead of Adam), with ``M`` inducing
inputs per class, ``M = round(p·N_train)``. Reports the mean ± standard error over the splits of the test
negative log-likelihood and test error beside the paper's Table 2 and 3 values (:data:`PAPER`), and the
difference in standard errors. The paper's New-thyroid and Svmguide2 are in no package (see
``benchmarks.datasets.UNAVAILABLE``); iris and digits are pep's own additions.

Usage:  .venv/bin/python -m benchmarks.bench_multiclass_uci [--splits 20] [--datasets glass wine] [--jobs 2]
            [--splits-of satellite=10] [--gpu satellite] [--time-budget SECONDS] [--merge] [--name multiclass_uci]
Writes: benchmarks/results/NAME.json after every finished setting (only settings with all their splits)

Work is cut into units, one (data set, fraction, method, chunk of splits) each (:func:`plan`), run longest
first in child processes: ``--jobs`` of them at once, each pinned to its own
core (``taskset -c k``) with one BLAS and one XLA thread, plus one child at a time on the GPU for the data
sets named by ``--gpu`` (``JAX_PLATFORMS=cuda``; a failed GPU unit goes back to the CPU queue). Split ``i``
is the ``i``-th split of the same seeded generator whatever ``--splits``, ``--chunk`` and ``--jobs`` are
(``--splits-of satellite=10`` gives one set fewer),
and every fit is deterministic, so the numbers do not depend on the layout (a GPU's rounding aside: each
row records its device). ``--time-budget`` stops the run in time: children still running when it ends are
killed and the file keeps the settings that finished. ``--merge`` keeps the settings already in
``results/NAME.json`` (run with the same iterations, learning rate, tolerance and seed) and runs only the
others, so a partial run and a later one make one table.

A unit that overruns ``--setting-timeout`` is killed and retried: on a loaded 2-core machine XLA CPU
intermittently wedges inside a compiled call (all threads idle, the caller blocked in
``BlockUntilReady``; a fit that normally takes 0.3 s never returns), with or without
``--xla_cpu_multi_thread_eigen=false`` (the workaround of PyAutoLabs/PyAutoFit#1528) or
``--xla_cpu_use_xnnpack=false``. Pinned to one core the wedge has not occurred.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from benchmarks import datasets
from benchmarks._common import Stopwatch, arguments, read_results, standard_error, write_results


@dataclass(frozen=True)
class Protocol:
    """How the paper uses one set: :func:`benchmarks.datasets.load`'s options and the test fraction of a split."""

    options: dict = field(default_factory=dict)
    test_size: float = 0.1


DATASETS = {
    "glass": Protocol(), "satellite": Protocol(test_size=0.8), "vehicle": Protocol(),
    "vowel": Protocol({"classes": 6}), "waveform": Protocol({"rows": 1000, "seed": 0}, test_size=0.7),
    "wine": Protocol(), "iris": Protocol(), "digits": Protocol(),
}
PAPER_SETS = ("glass", "satellite", "vehicle", "vowel", "waveform", "wine")
FRACTIONS = (0.05, 0.10, 0.20)
METHODS = ("ep", "sep")

_TABLE_2_3 = """
glass     ep  0.78 0.06 0.31 0.02  0.74 0.06 0.29 0.02  0.75 0.06 0.28 0.02
glass     sep 0.77 0.07 0.31 0.02  0.79 0.07 0.30 0.02  0.81 0.07 0.28 0.02
satellite ep  0.31 0.00 0.11 0.00  0.30 0.00 0.11 0.00  0.30 0.00 0.11 0.00
satellite sep 0.33 0.00 0.12 0.00  0.34 0.00 0.12 0.00  0.36 0.00 0.12 0.00
vehicle   ep  0.34 0.02 0.17 0.01  0.33 0.02 0.16 0.01  0.33 0.02 0.16 0.01
vehicle   sep 0.34 0.02 0.16 0.01  0.34 0.02 0.16 0.01  0.34 0.02 0.16 0.01
vowel     ep  0.25 0.01 0.09 0.01  0.19 0.01 0.05 0.01  0.16 0.01 0.03 0.00
vowel     sep 0.25 0.01 0.09 0.01  0.19 0.01 0.06 0.01  0.18 0.01 0.05 0.01
waveform  ep  0.36 0.00 0.15 0.00  0.36 0.01 0.16 0.00  0.37 0.01 0.16 0.00
waveform  sep 0.39 0.01 0.16 0.00  0.41 0.01 0.16 0.00  0.45 0.01 0.17 0.00
wine      ep  0.07 0.01 0.03 0.01  0.06 0.01 0.02 0.01  0.05 0.01 0.01 0.01
wine      sep 0.08 0.01 0.03 0.01  0.07 0.01 0.03 0.01  0.06 0.01 0.03 0.01
"""
PAPER: dict[tuple[str, float, str], tuple[float, float, float, float]] = {
    (cells[0], fraction, cells[1]): tuple(float(v) for v in cells[2 + 4 * k: 6 + 4 * k])
    for cells in (line.split() for line in _TABLE_2_3.strip().splitlines()) for k, fraction in enumerate(FRACTIONS)
}
"""Villacampa-Calvo & Hernández-Lobato 2017, Table 2 (test NLL) and Table 3 (test error), EP and SEP columns:
(data set, fraction, method) → (NLL, its ±, error, its ±), as printed (two decimals)."""

# The paper's R code run on this machine on one 90/10 Wine split, as quoted in issue 5 (NLL / error).
R_CODE_WINE = {"ep": (0.044, 0.083), "sep": (0.056, 0.122)}

def _estimator(method: str):
    from pep_gp import MultiClassEPClassifier, MultiClassGPClassifier

    return {"ep": MultiClassEPClassifier, "sep": MultiClassGPClassifier}[method]


def _run(x, y, train, test, fraction, method, args):
    scaler = StandardScaler().fit(x[train])
    x_train, x_test = scaler.transform(x[train]), scaler.transform(x[test])
    num_inducing = max(1, round(fraction * train.size))
    paper = {"likelihood": "pairwise", "train_inducing": True} if method == "sep" else {}  # eq. (6), learned Z
    clf = _estimator(method)(num_inducing=num_inducing, alpha=1.0, max_iter=args.iterations, tol=args.tol,
                             learning_rate=args.learning_rate, seed=args.seed, **paper)
    with Stopwatch() as timer:
        clf.fit(x_train, y[train])
    seconds = timer.seconds
    proba = clf.predict_proba(x_test)
    return {
        "num_inducing": num_inducing,
        "test_nll": float(log_loss(y[test], proba, labels=clf.classes_)),
        "test_error": float(np.mean(clf.predict(x_test) != y[test])),
        "log_marginal_likelihood": clf.log_marginal_likelihood(),
        "steps": clf.n_iter_,
        "train_seconds": seconds,
        "rejected_steps": clf.n_rejected_steps_,
        "skipped_rows": getattr(clf, "n_skipped_rows_", 0),
    }


def _summary(runs):
    def stat(key):
        values = [r[key] for r in runs]
        return float(np.mean(values)), standard_error(values)

    # Median fit time: the first split a child fits of each shape also pays for JIT compilation.
    seconds = float(np.median([r["train_seconds"] for r in runs]))
    return {"test_nll": stat("test_nll"), "test_error": stat("test_error"), "median_train_seconds": seconds}


def difference(pep: tuple[float, float], paper: tuple[float, float]) -> str:
    """pep's mean minus the paper's in standard errors of the difference ``√(se_pep² + se_paper²)``, marked
    ``†`` where pep's mean is outside the paper's error bar (a bar printed ``± 0.00`` counts as ± 0.005: two
    decimals)."""
    gap = pep[0] - paper[0]
    scale = float(np.hypot(pep[1] if np.isfinite(pep[1]) else 0.0, paper[1]))
    cell = f"{round(gap / scale, 1) + 0.0:+.1f}" if scale > 0 else "—"  # + 0.0: no "-0.0"
    return cell + (" †" if abs(gap) > max(paper[1], 0.005) else "")


def _paper_cells(row) -> tuple[str, str, str, str]:
    paper = PAPER.get((row["dataset"], row["fraction"], row["method"]))
    if paper is None:
        return "—", "—", "—", "—"
    return (f"{paper[0]:.2f} ± {paper[1]:.2f}", difference(row["test_nll"], paper[:2]),
            f"{paper[2]:.2f} ± {paper[3]:.2f}", difference(row["test_error"], paper[2:]))


def summary_table(summaries) -> str:
    """The results table of ``summaries`` (what the run prints and stores; docs/results/multiclass.md shows
    it): paper | pep | Δ for the test NLL and the test error, then a line saying what ran."""
    lines = [
        "| data | M | method | NLL paper | NLL pep | Δ NLL (s.e.) | error paper | error pep | Δ error (s.e.) | median s / fit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summaries:
        nll_paper, nll_gap, err_paper, err_gap = _paper_cells(row)
        nll, err, sec = row["test_nll"], row["test_error"], row["median_train_seconds"]
        lines.append(
            f"| {row['dataset']} | {int(round(100 * row['fraction']))} % ({row['num_inducing']}) | {row['method'].upper()} | "
            f"{nll_paper} | {nll[0]:.3f} ± {nll[1]:.3f} | {nll_gap} | "
            f"{err_paper} | {err[0]:.3f} ± {err[1]:.3f} | {err_gap} | {sec:.1f} |"
        )
    ran = {}
    for row in summaries:
        ran.setdefault((row["splits"], row["iterations"], row.get("device", "cpu")), []).append(row["dataset"])
    rates = dict(sorted((row["method"], row["learning_rate"]) for row in summaries if "learning_rate" in row))
    lines.append("Ran: " + "; ".join(f"{', '.join(dict.fromkeys(names))}: {splits} split{'s' * (splits != 1)} × "
                                     f"{iterations} iterations" + ("" if device == "cpu" else f" on the {device.upper()}")
                                     for (splits, iterations, device), names in ran.items())
                 + ("; Adam learning rate " + ", ".join(f"{m.upper()} {rate}" for m, rate in rates.items()) if rates else "")
                 + ". R code on one Wine split (issue 5, NLL / error): "
                 + ", ".join(f"{m.upper()} {v[0]} / {v[1]}" for m, v in R_CODE_WINE.items()))
    return "\n".join(lines)


# --- units of work -------------------------------------------------------------------------------------------


def table(result: dict) -> str:
    """A committed run's table as the results page shows it (docs/results.py): :func:`summary_table`'s rows, and
    its line saying what ran as a paragraph of its own under them."""
    rows, _, note = summary_table(result["summary"]).rpartition("\n")
    return f"{rows}\n\n{note}"


def _splits(name: str, args) -> tuple[np.ndarray, np.ndarray, list]:
    """The set's rows and its first ``args.splits`` splits (the i-th split is the same for any count)."""
    ds = datasets.load(name, **DATASETS[name].options)
    splitter = StratifiedShuffleSplit(args.splits, test_size=DATASETS[name].test_size, random_state=args.seed)
    return ds.x, ds.y, list(splitter.split(ds.x, ds.y))


def _unit(name: str, fraction: float, method: str, first: int, stop: int, args) -> list[dict]:
    """Splits ``first..stop−1`` of one setting, in this process."""
    x, y, splits = _splits(name, args)
    return [_run(x, y, *splits[i], fraction, method, args) | {"split": i} for i in range(first, stop)]


@dataclass
class Unit:
    name: str
    fraction: float
    method: str
    first: int
    stop: int
    gpu: bool
    attempts: int = 0

    @property
    def setting(self) -> tuple[str, float, str]:
        return self.name, self.fraction, self.method


def fit_seconds(name: str, fraction: float, shape: tuple[int, int]) -> float:
    """Rough seconds of one 250-iteration fit on one core of a set with ``shape`` = (rows, classes):
    ``2 + 1.4e-5 · N_train · C · M · (1 + M/50)``, fitted to single fits measured on a loaded 2-core
    machine (niced, load 2.5–3.5): satellite SEP at M = 64, 129 and 257 (29, 46 and 178 s; the model 18,
    53 and 178), vehicle at 38 and 152 (2–3 and 18–22 s; the model 5 and 29), vowel at 97 (9–12 s; 14).
    It orders the units, longest first, and sizes them."""
    train = shape[0] * (1 - DATASETS[name].test_size)
    m = max(1, round(fraction * train))
    return 2 + 1.4e-5 * train * shape[1] * m * (1 + m / 50)


def plan(args, shapes: dict[str, tuple[int, int]], done: frozenset = frozenset()) -> list[Unit]:
    """The units of work, longest first: each setting's splits (but those of the settings in ``done``) cut
    into chunks of ``--chunk`` splits, or by default into chunks of at most an eighth of the estimated total
    per worker (each unit pays a process start and a compilation, about 10 s: small sets stay whole)."""
    settings = [(n, f, m) for n in args.datasets for f in FRACTIONS for m in METHODS if (n, f, m) not in done]
    splits = {n: splits_of(n, args) for n in args.datasets}
    total = sum(splits[n] * fit_seconds(n, f, shapes[n]) for n, f, _ in settings)
    target = total / (8 * (args.jobs + bool(args.gpu)))
    units = []
    for name, fraction, method in settings:
        count = splits[name]
        pieces = -(-count // (args.chunk or max(1, int(target // fit_seconds(name, fraction, shapes[name])))))
        chunk = -(-count // pieces)  # even chunks: 20 splits at most 17 a unit make 10 + 10, not 17 + 3
        units += [Unit(name, fraction, method, first, min(first + chunk, count), name in args.gpu)
                  for first in range(0, count, chunk)]
    units.sort(key=lambda u: -(u.stop - u.first) * fit_seconds(u.name, u.fraction, shapes[u.name]))
    return units


def learning_rate(method: str, args) -> float:
    """Adam's learning rate for ``method``: ``--ep-learning-rate`` for EP where given, else ``--learning-rate``."""
    return args.ep_learning_rate if method == "ep" and args.ep_learning_rate else args.learning_rate


def splits_of(name: str, args) -> int:
    """The number of splits ``name`` runs: ``--splits``, or its ``--splits-of NAME=K``."""
    return args.splits_of.get(name, args.splits)


def _child_command(unit: Unit, args) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bench_multiclass_uci", "--child", unit.name, str(unit.fraction),
            unit.method, str(unit.first), str(unit.stop), "--splits", str(splits_of(unit.name, args)), "--iterations",
            str(args.iterations), "--learning-rate", str(learning_rate(unit.method, args)), "--tol", str(args.tol),
            "--seed", str(args.seed)]


def _child_env(gpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    if gpu:
        env.update(JAX_PLATFORMS="cuda", XLA_PYTHON_CLIENT_PREALLOCATE="false")
        return env
    flags = "--xla_cpu_multi_thread_eigen=false"  # XLA sizes its thread pool by the cores taskset allows
    env.update(JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               XLA_FLAGS=f"{env.get('XLA_FLAGS', '')} {flags}".strip())
    return env


@dataclass
class Running:
    unit: Unit
    process: subprocess.Popen
    started: float
    slot: int
    out: Any  # the child's stdout and stderr, in files (a pipe left unread would block a chatty child)
    err: Any

    def output(self) -> tuple[str, str]:
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read(), self.err.read()


def _start(unit: Unit, slot: int, args) -> Running:
    """Start ``unit`` in a child pinned to core ``slot`` (where ``taskset`` exists), in its own process group
    but this process's session: on Linux with autogroup scheduling a new session is a new scheduling group at
    nice 0, so a run started with ``nice`` would compete at full weight through its children."""
    command = _child_command(unit, args)
    cores = sorted(os.sched_getaffinity(0))
    if shutil.which("taskset"):
        command = ["taskset", "-c", str(cores[slot % len(cores)])] + command
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=_child_env(unit.gpu),
                               process_group=0)
    return Running(unit, process, time.monotonic(), slot, out, err)


def _kill(running: Running) -> None:
    try:
        os.killpg(running.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    running.process.wait()


def run_units(units: list[Unit], args, on_done) -> list[Unit]:
    """Run ``units`` (longest first) on ``args.jobs`` pinned CPU children and one GPU child (a core with
    nothing left to do takes the GPU's smallest waiting unit); ``on_done(unit, results)`` after each.
    Returns the units that did not finish before ``args.time_budget``."""
    deadline = time.monotonic() + args.time_budget if args.time_budget else float("inf")
    queues = {False: [u for u in units if not u.gpu], True: [u for u in units if u.gpu]}
    running: list[Running] = []
    try:
        return _loop(queues, running, deadline, args, on_done)
    finally:  # an error or an interrupt leaves no child behind
        for job in running:
            _kill(job)


def _loop(queues, running: list[Running], deadline: float, args, on_done) -> list[Unit]:
    while queues[False] or queues[True] or running:
        if time.monotonic() > deadline:
            for job in running:
                _kill(job)
            print(f"time budget of {args.time_budget} s spent: {len(running)} running units killed", flush=True)
            return [job.unit for job in running] + queues[False] + queues[True]
        busy = {job.slot for job in running}
        for slot in range(args.jobs):
            if slot in busy:
                continue
            if queues[False]:
                running.append(_start(queues[False].pop(0), slot, args))
            elif len(queues[True]) > 1 or (queues[True] and any(j.unit.gpu for j in running)):
                unit = queues[True].pop()  # an idle core takes the GPU's smallest waiting unit
                unit.gpu = False
                running.append(_start(unit, slot, args))
        if queues[True] and not any(j.unit.gpu for j in running):
            running.append(_start(queues[True].pop(0), args.jobs, args))
        time.sleep(0.05)
        for job in list(running):
            code = job.process.poll()
            overran = code is None and time.monotonic() - job.started > args.setting_timeout
            if code is None and not overran:
                continue
            running.remove(job)
            unit = job.unit
            if overran:
                _kill(job)
                unit.attempts += 1
                print(f"  {unit.setting} splits {unit.first}..{unit.stop - 1}: attempt {unit.attempts} overran, "
                      "retrying", flush=True)
                if unit.attempts >= args.attempts:
                    raise RuntimeError(f"{unit.setting}: {args.attempts} attempts overran {args.setting_timeout} s")
                queues[unit.gpu].insert(0, unit)
                continue
            out, err = job.output()
            if code != 0:
                if unit.gpu:  # the GPU could not run it: the CPU children run it and the GPU's other units
                    lines = err.strip().splitlines() or ["no message"]
                    reason = next((line for line in reversed(lines) if "Error" in line), lines[-1])
                    print(f"  {unit.setting} on the GPU failed ({reason.strip()}); its units move to the CPU", flush=True)
                    for moved in [unit] + queues[True]:
                        moved.gpu = False
                    queues[False][:0] = [unit] + queues[True]
                    queues[True] = []
                    continue
                raise RuntimeError(f"{unit.setting} splits {unit.first}..{unit.stop - 1} failed:\n{err[-3000:]}")
            on_done(unit, json.loads(out.strip().splitlines()[-1]))
    return []


def _merged(name: str, settings: dict) -> tuple[list[dict], list[dict]]:
    """The summaries and runs already in ``results/NAME.json``; it must have been run with ``settings``'
    iterations, learning rate, tolerance and seed."""
    old = read_results(name)
    if not old:
        return [], []
    keys = ("iterations", "learning_rate", "ep_learning_rate", "tol", "seed")
    differ = [k for k in keys if old["settings"].get(k) != settings[k]]
    if differ:
        raise ValueError(f"--merge: results/{name}.json was run with other settings: "
                         + ", ".join(f"{k}={old['settings'].get(k)!r} (now {settings[k]!r})" for k in differ))
    return old["summary"], old["runs"]


def _splits_of(parser, items: list[str]) -> dict[str, int]:
    counts = {}
    for item in items:
        name, _, count = item.partition("=")
        if name not in DATASETS or not count.isdigit() or int(count) < 1:
            parser.error(f"--splits-of: expected NAME=K with NAME one of {sorted(DATASETS)} and K ≥ 1, got {item!r}")
        counts[name] = int(count)
    return counts


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_multiclass_uci``."""
    parser = arguments(__doc__, splits=20, name="multiclass_uci")
    parser.add_argument("--datasets", nargs="+", default=list(PAPER_SETS), choices=sorted(DATASETS))
    parser.add_argument("--splits-of", nargs="*", default=[], metavar="NAME=K",
                        help="another split count for a data set (e.g. satellite=10)")
    parser.add_argument("--chunk", type=int, default=None,
                        help="splits per unit of work (default: sized by the estimated cost, see plan())")
    parser.add_argument("--iterations", type=int, default=250)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--ep-learning-rate", type=float, default=None,
                        help="EP's learning rate where it differs from --learning-rate (SEP's)")
    parser.add_argument("--tol", type=float, default=0.0, help="the estimators' stopping rule (0: all --iterations)")
    parser.add_argument("--jobs", type=int, default=1, help="CPU child processes at once, each on its own core")
    parser.add_argument("--gpu", nargs="*", default=[], choices=sorted(DATASETS),
                        help="data sets whose units run one at a time on the GPU (JAX_PLATFORMS=cuda)")
    parser.add_argument("--time-budget", type=float, default=0.0,
                        help="seconds; units still running then are killed (0: no limit)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the settings already in results/NAME.json and run only the others")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--setting-timeout", type=float, default=600.0, help="seconds before a unit is retried")
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--child", nargs=5, metavar=("DATASET", "FRACTION", "METHOD", "FIRST", "STOP"),
                        help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> dict:
    parser = cli()
    args = parser.parse_args(argv)
    args.splits_of = _splits_of(parser, args.splits_of)
    for option in ("splits", "jobs", "chunk"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option} must be at least 1, got {value}")
    if args.child:
        name, fraction, method, first, stop = args.child
        print(json.dumps(_unit(name, float(fraction), method, int(first), int(stop), args)))
        return {}

    start = time.monotonic()
    settings = {k: v for k, v in vars(args).items() if k not in ("child", "name", "merge")}
    try:
        summaries, runs = _merged(args.name, settings) if args.merge else ([], [])
    except ValueError as error:
        parser.error(str(error))
    merged = frozenset((s["dataset"], s["fraction"], s["method"]) for s in summaries)
    labels = {name: datasets.load(name, **DATASETS[name].options).y for name in args.datasets}
    shapes = {name: (y.size, int(y.max()) + 1) for name, y in labels.items()}
    units = plan(args, shapes, merged)
    estimate = sum((u.stop - u.first) * fit_seconds(u.name, u.fraction, shapes[u.name]) + 10 for u in units)
    print(f"{len(units)} units, about {estimate:.0f} core-seconds by fit_seconds' model", flush=True)
    pieces: dict[tuple[str, float, str], list[dict]] = {}
    devices: dict[tuple[str, float, str], set[str]] = {}
    order = {(n, f, m): k for k, (n, f, m) in enumerate((n, f, m) for n in DATASETS for f in FRACTIONS for m in METHODS)}

    def on_done(unit: Unit, results: list[dict]) -> None:
        pieces.setdefault(unit.setting, []).extend(results)
        devices.setdefault(unit.setting, set()).add("gpu" if unit.gpu else "cpu")
        done = sorted(pieces[unit.setting], key=lambda r: r["split"])
        if len(done) < splits_of(unit.setting[0], args):
            return
        name, fraction, method = unit.setting
        runs.extend(r | {"dataset": name, "fraction": fraction, "method": method} for r in done)
        summaries.append({"dataset": name, "fraction": fraction, "method": method,
                          "num_inducing": done[0]["num_inducing"], "splits": len(done),
                          "iterations": args.iterations, "learning_rate": learning_rate(method, args),
                          "device": "+".join(sorted(devices[unit.setting])),
                          **_summary(done)})
        print(summary_table(summaries[-1:]).splitlines()[2], f"({time.monotonic() - start:.0f} s)", flush=True)
        summaries.sort(key=lambda s: order[s["dataset"], s["fraction"], s["method"]])
        runs.sort(key=lambda r: (order[r["dataset"], r["fraction"], r["method"]], r["split"]))
        write_results(args.name, {"settings": settings, "summary": summaries, "runs": runs,
                                  "table": summary_table(summaries)}, echo=False)

    left = run_units(units, args, on_done)
    unfinished = sorted({u.setting for u in left})
    if unfinished:
        print(f"not finished within the budget (not in the file): {unfinished}", flush=True)
    print(summary_table(summaries))
    return {"summary": summaries, "unfinished": unfinished}


if __name__ == "__main__":
    main()
