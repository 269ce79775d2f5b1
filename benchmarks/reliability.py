"""A reliability pass over the bad inputs, faults and races of issue 62, each as a user meets it: a fresh
``pep`` (or ``python``) process per case, and for each its exit code, the last line it printed on stderr,
how many lines that was, its wall seconds and its peak memory, and whether it ended as documented (one
line naming what was wrong and where, exit code 2; or the documented recovery, checked).

The cases (issue 62's numbering):

1. ``count-target``: an integer count target with gaps (doctor-visit-like, 0 … dozens) at ``--task auto``.
3. ``nan-params`` / ``three-labels``: a run whose checkpoint holds a NaN (digests consistent), and one whose
   manifest gives a binary model three labels, read by ``pep_gp.load`` and ``pep predict``.
4. ``load-while-training``: ``pep_gp.load`` in a loop while ``pep train`` checkpoints every step into the run
   (every load succeeds); ``killed-predict``: ``kill -9`` of ``pep predict`` mid-write, then the same
   ``pep predict`` again (the leftovers swept).
5. ``evaluate-other-data``: ``pep evaluate --data OTHER`` keeps the training record and writes its own.
6. ``long-field``: a CSV with one field of ``--field-mb`` MB (1,024: the issue's 1 GB; memory bounded);
   ``inducing-beyond-rows``: ``inducing_points=`` of 10⁷ rows for a 120-row fit; ``billion-samples``:
   ``pep predict --samples 1000000000``.
9. ``na-default`` (a missing cell at predict time named by its line), ``integer-ids`` (Parquet predictions
   keep integer ids), ``empty-header``, ``nul-bytes``, ``append-out`` and ``kernels-reachable``.

Items 2 (committed tables regenerate: ``python -m benchmarks.verify``), 7 and 8 (documentation) are checked
elsewhere. Usage::

    .venv/bin/python -m benchmarks.reliability [--field-mb 1024] [--only CASE ...] [--name reliability]

Writes ``benchmarks/results/NAME.json``; exits 1 when a case did not end as documented.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ._common import arguments, temporary_directory, write_results

PEP = str(Path(sys.executable).parent / "pep")


@dataclass
class Outcome:
    """One process's end: exit code, stderr's non-empty lines, wall seconds, peak resident MiB."""

    code: int
    lines: list[str]
    seconds: float
    peak_mib: float

    @property
    def message(self) -> str:
        return self.lines[-1] if self.lines else ""

    def refused(self, *words: str) -> bool:
        """Ended as a refusal: exit code 2, one line on stderr holding each of ``words``."""
        return self.code == 2 and len(self.lines) == 1 and all(w in self.message for w in words)


def launched(args: list[str], cwd: Path, timeout: float = 900) -> Outcome:
    """Run ``args`` to its end in a fresh process (stdout discarded) and measure it (its own peak resident
    memory: ``wait4``'s); killed after ``timeout`` seconds."""
    started = time.perf_counter()
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.append(process.stderr.read()))
    reader.start()
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    _, status, usage = os.wait4(process.pid, 0)
    timer.cancel()
    reader.join()
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in "".join(stderr).splitlines() if line.strip()]
    return Outcome(process.returncode, lines, time.perf_counter() - started, usage.ru_maxrss / 1024)


def python(code: str, cwd: Path) -> Outcome:
    return launched([sys.executable, "-c", code], cwd)


def table(path: Path, rows: int = 400, seed: int = 0, classes: bool = True) -> Path:
    """A small CSV with two numeric features, a category, an integer id and a binary (or numeric) target."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 2))
    frame = pd.DataFrame({"id": np.arange(1000, 1000 + rows), "a": x[:, 0], "b": x[:, 1],
                          "colour": rng.choice(["red", "green", "blue"], size=rows)})
    frame["y"] = np.where(x[:, 0] + x[:, 1] > 0, "yes", "no") if classes else x[:, 0] - x[:, 1]
    frame.to_csv(path, index=False)
    return path


class Pass:
    """The cases, sharing one small store and one trained run in a working directory."""

    def __init__(self, work: Path, field_mb: int):
        self.work, self.field_mb = work, field_mb
        self.csv = table(work / "t.csv")
        self.store, self.run = work / "t.zarr", work / "run"

    def prepared(self) -> None:
        for args in (["ingest", "csv", "--input", self.csv, "--target", "y", "--id", "id", "--out", self.store],
                     ["train", "--model", "sparse-gp-classifier", "--data", self.store, "--run-dir", self.run,
                      "--max-steps", "20", "--quiet"]):
            outcome = launched([PEP, *map(str, args)], self.work)
            if outcome.code != 0:
                raise SystemExit(f"preparing the pass: pep {args[0]} failed: {outcome.message}")

    def count_target(self):
        rng = np.random.default_rng(1)
        visits = rng.negative_binomial(0.7, 0.08, size=4000)
        pd.DataFrame({"pid": np.arange(4000), "age": rng.normal(size=4000), "visits": visits}).to_parquet(
            self.work / "counts.parquet")
        out = launched([PEP, "ingest", "parquet", "--input", "counts.parquet", "--target", "visits", "--id", "pid",
                        "--out", "counts.zarr"], self.work)
        return out, out.refused("--task regression", "--task classification") and not (self.work / "counts.zarr").exists()

    def _rewritten(self, name: str, edit: str) -> Path:
        """A copy of the run whose one checkpoint is written again (digests consistent) after ``edit``."""
        code = ("import json, jax, numpy as np, sys\n"
                "from pep_gp.pipeline.runs import checkpoint\nfrom pep_gp.pipeline.runs.run import load_run\n"
                f"r = load_run({str(self.run)!r})\n"
                "leaves, tree = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.array, r.trees['params']))\n"
                "meta = json.loads(json.dumps({k: v for k, v in r.meta.items() if k not in ('format', 'step', 'leaves')}))\n"
                f"{edit}\n"
                f"checkpoint.save({str(self.work / name)!r}, r.step, {{'params': tree.unflatten(leaves)}}, meta, keep=1)\n")
        written = python(code, self.work)
        if written.code != 0:
            raise SystemExit(f"rewriting the run for {name}: {written.message}")
        return self.work / name

    def _loaded_and_predicted(self, run: Path, *words: str):
        loaded = python(f"import pep_gp; pep_gp.load({str(run)!r})", self.work)
        predicted = launched([PEP, "predict", "--run-dir", str(run), "--input", str(self.csv), "--out",
                              str(self.work / f"{run.name}.csv")], self.work)
        ok = (loaded.code == 1 and any(all(w in line for w in words) for line in loaded.lines)
              and predicted.refused(*words) and not (self.work / f"{run.name}.csv").exists())
        return [loaded, predicted], ok

    def nan_params(self):
        run = self._rewritten("nan-run", "leaves[-1].flat[0] = np.nan")
        return self._loaded_and_predicted(run, "non-finite")

    def three_labels(self):
        run = self._rewritten("labels-run", "meta['transforms']['labels'] = [0, 1, 2]")
        return self._loaded_and_predicted(run, "labels")

    def load_while_training(self):
        run = self.work / "racing-run"
        trainer = subprocess.Popen([PEP, "train", "--model", "sparse-gp-classifier", "--data", str(self.store),
                                    "--run-dir", str(run), "--max-steps", "400", "--batch-size", "32",
                                    "--set", "checkpoint_every=1", "--quiet"], cwd=self.work,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        loads = python("import os, time, pep_gp\n"
                       f"run = {str(run)!r}\n"
                       "while not os.path.isdir(os.path.join(run, 'checkpoints')): time.sleep(0.05)\n"
                       "ok = failed = 0\n"
                       "for _ in range(150):\n"
                       "    try: pep_gp.load(run); ok += 1\n"
                       "    except Exception as e: failed += 1; import sys; print(type(e).__name__, e, file=sys.stderr)\n"
                       "import sys; print(f'{ok} loads, {failed} failed', file=sys.stderr)\n", self.work)
        _, stderr = trainer.communicate(timeout=900)
        return loads, (loads.code == 0 and loads.message.endswith(" 0 failed") and trainer.returncode == 0)

    def killed_predict(self):
        big = table(self.work / "big.csv", rows=300_000, seed=2)
        out = self.work / "big-predictions.csv"
        args = [PEP, "predict", "--run-dir", str(self.run), "--input", str(big), "--out", str(out)]

        def hidden() -> list[str]:  # a predict's output while it is written, and its lock
            return sorted(p.name for p in self.work.iterdir() if p.name.startswith(f".{out.stem}.predict-"))

        first = subprocess.Popen(args, cwd=self.work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not any(not name.endswith(".lock") for name in hidden()) and first.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        left = hidden()
        again = launched(args, self.work)
        after = hidden()
        again.lines.append(f"left by kill -9: {left}; after the next predict: {after}")  # beside its own message
        return again, first.returncode == -signal.SIGKILL and bool(left) and not after and again.code == 0 and out.exists()

    def evaluate_other_data(self):
        other_csv = table(self.work / "other.csv", seed=3)
        ingest = launched([PEP, "ingest", "csv", "--input", str(other_csv), "--target", "y", "--id", "id", "--out",
                           "other.zarr"], self.work)
        before = (self.run / "metrics.json").read_bytes()
        evaluated = launched([PEP, "evaluate", "--run-dir", str(self.run), "--data", "other.zarr", "--json"], self.work)
        records = list((self.run / "evaluations").glob("other.zarr-*.json"))
        kept = (self.run / "metrics.json").read_bytes() == before
        return [ingest, evaluated], ingest.code == 0 and evaluated.code == 0 and kept and len(records) == 1

    def long_field(self):
        path = self.work / "long-field.csv"
        with path.open("w") as file:
            file.write("a,b,y\n1.0,2.0,yes\n3.0,")
            block = "9" * (1 << 20)
            for _ in range(self.field_mb):
                file.write(block)
            file.write(",no\n")
        out = launched([PEP, "ingest", "csv", "--input", str(path), "--target", "y", "--out", "long.zarr"], self.work)
        path.unlink()
        return out, out.refused("long-field.csv") and not (self.work / "long.zarr").exists()

    def inducing_beyond_rows(self):
        out = python("import numpy as np, pep_gp\n"
                     "X = np.random.default_rng(0).normal(size=(120, 2)); y = X[:, 0] > 0\n"
                     "pep_gp.SparseGPClassifier(inducing_points=np.zeros((10_000_000, 2))).fit(X, y)\n", self.work)
        return out, out.code == 1 and out.seconds < 60 and "inducing_points" in out.message

    def billion_samples(self):
        out = launched([PEP, "predict", "--run-dir", str(self.run), "--input", str(self.csv), "--out",
                        "samples.csv", "--samples", "1000000000"], self.work)
        return out, out.refused("--samples") and not (self.work / "samples.csv").exists()

    def na_default(self):
        frame = pd.read_csv(self.csv).head(40)
        frame.loc[14, "a"] = np.nan  # the file's line 16 (the header is line 1)
        frame.to_csv(self.work / "holes.csv", index=False)
        out = launched([PEP, "predict", "--run-dir", str(self.run), "--input", "holes.csv", "--out", "holes-p.csv"],
                       self.work)
        return out, out.code == 2 and len(out.lines) == 1 and "line 16" in out.message

    def integer_ids(self):
        pd.read_csv(self.csv).to_parquet(self.work / "t.parquet")  # a typed input: its integer ids stay integers
        out = launched([PEP, "predict", "--run-dir", str(self.run), "--input", "t.parquet", "--out", "ids.parquet"],
                       self.work)
        ids = pd.read_parquet(self.work / "ids.parquet")["id"] if out.code == 0 else None
        out.lines.append(f"id column dtype: {None if ids is None else ids.dtype}")
        return out, ids is not None and pd.api.types.is_integer_dtype(ids)

    def empty_header(self):
        (self.work / "empty-header.csv").write_text("a,,y\n" + "".join(f"{i},{i % 3},{'yes' if i % 2 else 'no'}\n"
                                                                         for i in range(60)))
        out = launched([PEP, "ingest", "csv", "--input", "empty-header.csv", "--target", "y", "--out", "eh.zarr"],
                       self.work)
        return out, out.refused("empty-header.csv") and "Unnamed" not in out.message

    def nul_bytes(self):
        (self.work / "nul.csv").write_text("a,b,y\n" + "".join(f"{i}.5{chr(0) if i == 7 else ''},{i % 5},"
                                                               f"{'yes' if i % 2 else 'no'}\n" for i in range(60)))
        out = launched([PEP, "ingest", "csv", "--input", "nul.csv", "--target", "y", "--out", "nul.zarr"], self.work)
        categories = None
        if out.code == 0:
            from pep_gp.pipeline.data.stores import open_store

            categories = [f.column for f in open_store(self.work / "nul.zarr").transforms.features if f.kind == "one_hot" and f.column == "a"]
            out.lines.append(f"one-hot columns: {categories}")
        return out, (out.code == 2 and len(out.lines) == 1 and "nul.csv" in out.message) or (out.code == 0 and not categories)

    def append_out(self):
        out = launched([PEP, "ingest", "csv", "--input", str(self.csv), "--target", "y", "--append", "--out",
                        str(self.store)], self.work)
        return out, out.code == 2 and len(out.lines) == 1

    def kernels_reachable(self):
        out = python("import pep_gp; print(pep_gp.kernels.Matern52)", self.work)
        return out, out.code == 0


CASES: dict[str, tuple[str, Callable[[Pass], tuple]]] = {
    "count-target": ("1", Pass.count_target), "nan-params": ("3", Pass.nan_params),
    "three-labels": ("3", Pass.three_labels), "load-while-training": ("4", Pass.load_while_training),
    "killed-predict": ("4", Pass.killed_predict), "evaluate-other-data": ("5", Pass.evaluate_other_data),
    "long-field": ("6", Pass.long_field), "inducing-beyond-rows": ("6", Pass.inducing_beyond_rows),
    "billion-samples": ("6", Pass.billion_samples), "na-default": ("9", Pass.na_default),
    "integer-ids": ("9", Pass.integer_ids), "empty-header": ("9", Pass.empty_header),
    "nul-bytes": ("9", Pass.nul_bytes), "append-out": ("9", Pass.append_out),
    "kernels-reachable": ("9", Pass.kernels_reachable),
}


def cli():
    parser = arguments(__doc__, name="reliability")
    parser.add_argument("--field-mb", type=int, default=1024, help="the long field's size in MB")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="run these cases only")
    return parser


def main() -> None:
    args = cli().parse_args()
    results = []
    with temporary_directory("pep-reliability-") as work:
        cases = Pass(work, args.field_mb)
        cases.prepared()
        for name in args.only or CASES:
            item, case = CASES[name]
            outcomes, ok = case(cases)
            outcomes = outcomes if isinstance(outcomes, list) else [outcomes]
            results.append({"case": name, "item": item, "as_documented": bool(ok), "processes": [
                {"exit_code": o.code, "stderr_lines": len(o.lines), "message": o.message[:400], "seconds": round(o.seconds, 2),
                 "peak_mib": round(o.peak_mib, 1)} for o in outcomes]})
            print(f"{'ok  ' if ok else 'FAIL'} {name}: " + " | ".join(f"exit {o.code}: {o.message[:200]}" for o in outcomes),
                  flush=True)
    write_results(args.name, {"cases": results, "field_mb": args.field_mb}, echo=False)
    sys.exit(0 if all(r["as_documented"] for r in results) else 1)


if __name__ == "__main__":
    main()
