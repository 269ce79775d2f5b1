"""Re-run the quick benchmarks and compare their numbers with the committed ones, within the error bars.

Each check re-runs the command recorded in a committed ``benchmarks/results/NAME.json`` (its ``command``
field, written by :func:`benchmarks._common.write_json`) into a temporary directory
(``$PEP_BENCH_RESULTS``; a ``--out`` path is moved there too, so nothing committed is overwritten), reads
the same statistics from both files and calls a statistic reproduced when

    |rerun − committed| ≤ 2 √(se_rerun² + se_committed²)

(the two-standard-error rule of :func:`benchmarks._common.two_se_sign`); a statistic whose standard
errors are both zero (a test error every split agrees on) must agree to 1e-9. The quick benchmarks, each
deterministic on a CPU, about a quarter of an hour in all on a 2-core machine (``OPENBLAS_NUM_THREADS=1``
unless set; the times below are the committed runs' own):

* ``multiclass_uci_wine_iris``: multi-class EP and SEP on Wine and iris at M = 5/10/20 % of the rows,
  20 splits (Villacampa-Calvo & Hernández-Lobato 2017, Tables 2-3's protocol); test NLL and error per
  setting, mean ± s.e. over the splits (527 s of fits);
* ``bench_qp_glass_id``: EP and QP classifiers on glass with its Id column, one repeat of 10-fold CV
  (Zhang et al. 2020, Table 1's protocol); NLL and error of each, mean ± s.e. over the folds (55 s);
* ``bench_chile_probit``: logistic regression and the multinomial probit (maximum likelihood, and fitted
  to the pairwise product) on Chile's three splits; test NLL, mean ± s.e. over the splits (about 4 minutes).

The glass and Chile checks read their tables with the ``bench`` extra's readers (``pip install -e '.[bench]'``);
a check whose re-run fails says so in one line after the re-run's own output, and the others still run.

Usage::

    python -m benchmarks.verify                    # re-run each check, print the comparison, exit 1 on a miss
    python -m benchmarks.verify --list             # the checks and their commands; runs nothing
    python -m benchmarks.verify --only bench_qp_glass_id
    python -m benchmarks.verify --compare DIR      # compare the JSON already in DIR (an earlier re-run)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import ROOT, arguments, standard_error, temporary_directory, two_se_sign

COMMITTED = ROOT / "benchmarks" / "results"
Statistics = dict[str, tuple[float, float]]  # name -> (mean, standard error)


def _over(values: list[float]) -> tuple[float, float]:
    return sum(values) / len(values), standard_error(values)


def multiclass_uci(result: dict) -> Statistics:
    """Test NLL and error of each (data set, fraction of rows as M, method): the summary's mean ± s.e."""
    return {f"{row['dataset']} M={row['fraction']:g} {row['method']} {metric}": tuple(row[metric])
            for row in result["summary"] for metric in ("test_nll", "test_error")}


def qp_folds(result: dict) -> Statistics:
    """NLL and error of EP and QP on each data set, mean ± s.e. over its folds."""
    return {f"{name} {method} {metric}": _over([fold[method][metric] for fold in data["folds"]])
            for name, data in result["classification"].items() for method in ("ep", "qp") for metric in ("nll", "error")}


def chile_probit(result: dict) -> Statistics:
    """Each model's test NLL, mean ± s.e. over the splits."""
    return {f"{model} test_nll": _over(values) for model, values in result["test_nll"].items()}


CHECKS: dict[str, Callable[[dict], Statistics]] = {
    "multiclass_uci_wine_iris": multiclass_uci,
    "bench_qp_glass_id": qp_folds,
    "bench_chile_probit": chile_probit,
}


def committed(name: str) -> dict:
    return json.loads((COMMITTED / f"{name}.json").read_text())


def rerun_command(command: str, directory: Path) -> list[str]:
    """``command``'s ``python -m MODULE ARGS`` as this interpreter's argument list, a ``--out`` moved into
    ``directory``."""
    words = shlex.split(command)
    if words[:2] != ["python", "-m"]:
        raise ValueError(f"not a python -m command: {command!r}")
    words[0] = sys.executable
    for i, word in enumerate(words[:-1]):
        if word == "--out":
            words[i + 1] = str(directory / Path(words[i + 1]).name)
    return words


def rerun(name: str, directory: Path) -> None:
    """Run check ``name``'s recorded command with its results going to ``directory``."""
    env = {**os.environ, "PEP_BENCH_RESULTS": str(directory)}
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH")]))
    subprocess.run(rerun_command(committed(name)["command"], directory), cwd=ROOT, env=env, check=True)


def agree(new: tuple[float, float], old: tuple[float, float]) -> tuple[bool, float]:
    """Whether two (mean, s.e.) agree within two combined standard errors, and the allowed difference."""
    se = math.hypot(*(se if se is not None and math.isfinite(se) else 0.0 for se in (new[1], old[1])))
    if se == 0.0:
        allowed = 1e-9 * max(1.0, abs(old[0]))
        return abs(new[0] - old[0]) <= allowed, allowed
    return two_se_sign(new[0] - old[0], se) == 0, 2 * se


def compare(name: str, rerun_result: dict) -> list[tuple[str, float, float, float, bool]]:
    """Per statistic of check ``name``: (statistic, committed, re-run, allowed difference, agrees); a
    statistic the re-run lacks does not agree."""
    statistics = CHECKS[name]
    old, new = statistics(committed(name)), statistics(rerun_result)
    rows = []
    for key, value in old.items():
        if key not in new:
            rows.append((key, value[0], math.nan, math.nan, False))
            continue
        ok, allowed = agree(new[key], value)
        rows.append((key, value[0], new[key][0], allowed, ok))
    return rows


def report(name: str, rows: list[tuple[str, float, float, float, bool]]) -> bool:
    """Print check ``name``'s comparison; whether every statistic agrees."""
    print(f"{name}: {sum(ok for *_, ok in rows)}/{len(rows)} statistics within the error bars")
    for key, old, new, allowed, ok in rows:
        print(f"  {'ok  ' if ok else 'MISS'} {key}: committed {old:.6g}, re-run {new:.6g} (allowed ± {allowed:.2g})")
    return all(ok for *_, ok in rows)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.verify``."""
    parser = arguments(__doc__)
    parser.add_argument("--list", action="store_true", help="print the checks and their commands, run nothing")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), default=list(CHECKS), help="the checks to run")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="compare the results already in DIR/NAME.json instead of re-running")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = cli().parse_args(argv)
    if args.list:
        for name in args.only:
            print(f"{name}: {committed(name)['command']}")
        return 0
    good = True
    with temporary_directory("pep-verify-") as work:
        directory = args.compare or work
        for name in args.only:
            if args.compare is None:
                try:
                    rerun(name, directory)
                except subprocess.CalledProcessError as error:  # its own output above says why; the next still runs
                    print(f"{name}: the re-run failed (exit code {error.returncode}): not reproduced")
                    good = False
                    continue
            good &= report(name, compare(name, json.loads((directory / f"{name}.json").read_text())))
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
