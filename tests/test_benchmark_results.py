"""Every committed result says how to regenerate it (issue 62: "every committed result regenerates"; issue 64,
item 7): each ``benchmarks/results/*.json`` records the command that wrote it, ``python -m benchmarks.X args…``,
naming a benchmark that exists, with arguments its parser accepts today, and the git commit of the code it
ran; the harness's one writer records both, with the date and the machine, in every JSON it writes."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import _common

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
BENCHMARKS = sorted(path for path in (ROOT / "benchmarks").glob("*.py")
                    if not path.stem.startswith("_") and path.stem != "datasets")  # the shared modules aside
# made by an earlier bench_estimators whose data sets (and --fmnist-rows) are gone: the recorded commit regenerates them
OLDER_ARGUMENTS = {"bench_estimators", "bench_estimators_breast_cancer", "bench_estimators_exact_ep"}


def recorded(path: Path) -> dict:
    return json.loads(path.read_text())


def module_and_arguments(command: str) -> tuple[str, list[str]]:
    python, dash_m, module, *arguments = shlex.split(command)
    assert (python, dash_m) == ("python", "-m") and module.startswith("benchmarks."), command
    return module, arguments


def test_there_are_committed_results_and_benchmarks():
    assert len(RESULTS) >= 80 and len(BENCHMARKS) >= 35


@pytest.mark.parametrize("path", RESULTS, ids=[path.stem for path in RESULTS])
def test_each_result_records_its_command_and_commit(path):
    result = recorded(path)
    module, _ = module_and_arguments(result["command"])
    assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file(), f"{path.name}: no module {module}"
    assert re.fullmatch(r"[0-9a-f]{40}", result["commit"]), f"{path.name}: commit {result['commit']!r}"


@pytest.mark.parametrize("path", [path for path in RESULTS if path.stem not in OLDER_ARGUMENTS],
                         ids=[path.stem for path in RESULTS if path.stem not in OLDER_ARGUMENTS])
def test_each_recorded_command_parses_with_its_benchmark_today(path):
    module, arguments = module_and_arguments(recorded(path)["command"])
    with contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            importlib.import_module(module).cli().parse_args(arguments)
        except SystemExit:
            pytest.fail(f"{path.name}: {module} refuses {arguments}: {errors.getvalue()}")


def test_the_results_made_with_older_arguments_are_still_committed():
    """Each exception above names a committed file (a removed one must leave the list too)."""
    assert OLDER_ARGUMENTS <= {path.stem for path in RESULTS}


@pytest.mark.parametrize("path", BENCHMARKS, ids=[path.stem for path in BENCHMARKS])
def test_each_benchmark_uses_the_harness(path):
    """One parser (``_common.arguments``), one kind of temporary directory and one JSON writer."""
    text = path.read_text()
    assert "argparse.ArgumentParser(" not in text and "def cli()" in text and "arguments(__doc__" in text
    assert "TemporaryDirectory(" not in text and "mkdtemp(" not in text
    assert not re.search(r"\.write_text\(json\.dumps", text) or path.stem == "bench_qp"  # --summarise re-renders


def test_the_writer_records_command_commit_date_and_machine(tmp_path, monkeypatch):
    """The command is the module's, as ``python -m`` ran it; the commit is the checkout's HEAD; facts the
    payload gives under ``machine`` are kept beside the harness's."""
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="benchmarks.bench_example")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/somewhere/bench_example.py", "--name", "two words", "--steps", "3"])
    path = _common.write_json(tmp_path / "out.json", {"machine": {"shared": "yes"}, "value": float("nan")})
    written = json.loads(path.read_text())
    assert written["command"] == "python -m benchmarks.bench_example --name 'two words' --steps 3"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert written["commit"] == (head or None) and isinstance(written["dirty"], bool) == bool(head)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", written["date"])
    assert written["machine"]["shared"] == "yes" and written["machine"]["cpus"] >= 1
    assert len(written["machine"]["load_avg"]) == 3 and written["value"] is None  # strict JSON: NaN is null
    assert list(written)[:5] == ["command", "commit", "dirty", "date", "machine"]


def test_the_common_flags_are_added_only_with_a_default():
    parser = _common.arguments("Doc.", name="bench_x", repeats=3)
    assert vars(parser.parse_args([])) == {"name": "bench_x", "repeats": 3}
    assert vars(parser.parse_args(["--repeats", "5"]))["repeats"] == 5
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parser.parse_args(["--steps", "2"])


def test_a_temporary_directory_is_a_path_removed_on_exit():
    with _common.temporary_directory("pep-test-") as work:
        assert isinstance(work, Path) and work.is_dir() and work.name.startswith("pep-test-")
        (work / "file").write_text("x")
    assert not work.exists()


def test_verify_lists_its_checks_with_their_recorded_commands(capsys):
    from benchmarks import verify

    assert verify.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{name}: {recorded(verify.COMMITTED / f'{name}.json')['command']}" for name in verify.CHECKS]


def test_verify_agrees_with_the_committed_results_and_catches_a_moved_number(tmp_path, capsys):
    """The committed JSON compared with themselves agree; QP's NLL moved by 0.05 on every fold (its mean by
    about nine standard errors of the mean, the spread unchanged) is named as a miss and fails the command."""
    from benchmarks import verify

    assert verify.main(["--compare", str(verify.COMMITTED)]) == 0
    result = recorded(verify.COMMITTED / "bench_qp_glass_id.json")
    for fold in result["classification"]["glass-id"]["folds"]:
        fold["qp"]["nll"] += 0.05
    (tmp_path / "bench_qp_glass_id.json").write_text(json.dumps(result))
    capsys.readouterr()
    assert verify.main(["--compare", str(tmp_path), "--only", "bench_qp_glass_id"]) == 1
    misses = [line for line in capsys.readouterr().out.splitlines() if "MISS" in line]
    assert len(misses) == 1 and "glass-id qp nll" in misses[0]


def test_verify_moves_a_recorded_out_path_into_its_directory(tmp_path):
    from benchmarks import verify

    words = verify.rerun_command("python -m benchmarks.bench_qp --repeats 1 --out benchmarks/results/x.json", tmp_path)
    assert words == [sys.executable, "-m", "benchmarks.bench_qp", "--repeats", "1", "--out", str(tmp_path / "x.json")]


def test_verify_agreement_is_two_combined_standard_errors():
    from benchmarks.verify import agree

    assert agree((1.0 + 2 * 5 - 1e-9, 3.0), (1.0, 4.0))[0] and not agree((1.0 + 2 * 5 + 1e-9, 3.0), (1.0, 4.0))[0]
    assert agree((0.25, 0.0), (0.25, 0.0))[0] and not agree((0.25 + 1e-6, 0.0), (0.25, 0.0))[0]
