"""Every command in README.md and in the getting-started and quick-start pages runs, verbatim: each page's
```bash and ```python blocks are run in order in an empty directory with the test's environment first on
PATH (the quick start makes its own small CSV). The blocks that cannot run inside a test are listed in
:data:`NOT_RUN_HERE` with what runs them instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/getting-started.md", "docs/quick-start.md")
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```$", re.M | re.S)

MAIN_JOB = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/pep demo"
TESTS = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test,infra]" && .venv/bin/python -m pytest'
NOT_RUN_HERE = {
    MAIN_JOB: "run verbatim on a copy of the repository by test_the_main_job_command_runs_on_a_fresh_copy (exhaustive)",
    TESTS: "this test suite itself (.ci/run runs the same set-up and pytest)",
    "python3 -m venv .venv && .venv/bin/pip install -e .": "the first two commands of the main job, run there",
    '.venv/bin/pip install -e . "jax[cuda12]"': "needs an NVIDIA GPU and JAX's CUDA wheels",
}


def blocks(page: str) -> list[tuple[str, str]]:
    """The ``(language, text)`` of each bash and python block of ``page``, in order."""
    return [(match.group(1), match.group(2).strip()) for match in BLOCK.finditer((ROOT / page).read_text())]


def runnable(page: str) -> list[tuple[str, str]]:
    return [(language, text) for language, text in blocks(page) if text not in NOT_RUN_HERE]


def run_blocks(page: str, directory: Path, skip: set[str] = frozenset()) -> list[subprocess.CompletedProcess]:
    """Run the page's runnable blocks (but those in ``skip``) in ``directory``: bash with ``set -euo pipefail``,
    python in this interpreter; the first failure fails the test, naming the block."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    done = []
    for language, text in runnable(page):
        if text in skip:
            continue
        command = ["bash", "-euo", "pipefail", "-c", text] if language == "bash" else [sys.executable, "-c", text]
        result = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{page}: this block failed ({result.returncode}):\n{text}\n{result.stderr[-3000:]}"
        done.append(result)
    return done


def test_the_fresh_machine_commands_are_in_the_readme_and_the_getting_started_page():
    for page in ("README.md", "docs/getting-started.md"):
        texts = [text for _, text in blocks(page)]
        assert MAIN_JOB in texts and TESTS in texts, page


def test_ci_runs_the_readme_s_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    # the README's install (without compiling every installed module to bytecode: the tests compile what they import)
    assert 'python3 -m venv .venv && .venv/bin/pip install -q --no-compile -e ".[test,infra]"' in ci
    assert "\nstage default .venv/bin/python -m pytest --durations=15\n" in ci  # the same run, reporting its slowest


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_page_has_commands_and_only_listed_ones_are_not_run():
    for page in PAGES:
        assert blocks(page), page
    assert runnable("README.md") and runnable("docs/quick-start.md")
    skipped = {text for page in PAGES for _, text in blocks(page) if text in NOT_RUN_HERE}
    assert skipped == set(NOT_RUN_HERE)


def shared_blocks() -> list[str]:
    """The quick start's runnable blocks that are the README's, verbatim."""
    readme = [text for _, text in runnable("README.md")]
    return [text for _, text in runnable("docs/quick-start.md") if text in readme]


def test_the_quick_start_walks_through_the_readmes_steps_verbatim():
    assert len(shared_blocks()) >= 3  # the CSV, the commands, the load: an edit of one page is made on both


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.long
def test_the_readme_and_quick_start_commands_run_verbatim(tmp_path):
    """The README's blocks, then the quick start's in the same directory: a block the two pages share is the
    same text (:func:`test_the_quick_start_walks_through_the_readmes_steps_verbatim`), so it runs once for both."""
    shared = shared_blocks()
    run_blocks("README.md", tmp_path)
    run_blocks("docs/quick-start.md", tmp_path, skip=set(shared))
    check_quick_start(tmp_path)
    assert any((tmp_path / "wine-run" / "checkpoints").glob("step-*/manifest.json"))
    assert any((tmp_path / "run-from-python" / "checkpoints").glob("step-*/manifest.json"))


def check_quick_start(directory: Path) -> None:
    """What the quick start promises: a store, a run, held-out metrics and one prediction per input row."""
    assert (directory / "customers.zarr").is_dir()
    lines = (directory / "predictions.csv").read_text().splitlines()
    assert lines[0] == "id,label,proba_no,proba_yes" and len(lines) == 301 and lines[1].startswith("c000,")
    evaluation = subprocess.run([str(Path(sys.executable).parent / "pep"), "evaluate", "--run-dir", "run", "--json"],
                                cwd=directory, capture_output=True, text=True, timeout=300)
    assert json.loads(evaluation.stdout)["test_error"] < 0.2  # the label is a threshold on income by city


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.long
def test_pep_demo_beats_logistic_regression(tmp_path):
    """``pep demo``, the README's main job, in this environment, checked as the verbatim run below checks it;
    in .ci/run the install stage and the plain-install import test (tests/test_packaging.py) stand in for that
    run's fresh environment."""
    result = subprocess.run([str(Path(sys.executable).parent / "pep"), "demo"], cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    check_demo(tmp_path / "pep-demo", result.stdout, result.stderr)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.exhaustive
def test_the_main_job_command_runs_on_a_fresh_copy(tmp_path):
    """The README's main job, verbatim, in a copy of the repository's tracked files (a new virtual
    environment and ``pip install -e .``, then ``pep demo``)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file() or (ROOT / name).is_symlink():  # links as links (src/pep_gp/infra)
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name, follow_symlinks=False)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PREFECT_API_URL")}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", MAIN_JOB], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    check_demo(tmp_path / "pep-demo", result.stdout, result.stderr)


def check_demo(out: Path, stdout: str, stderr: str) -> None:
    """What ``pep demo`` promises: six epochs of multi-class SEP on two workers, scored on the 10,000
    held-out flights, better than logistic regression and the class frequencies in test NLL, with the
    run's own metrics in the printed table and "compiling" said once."""
    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.training.baselines import classification_baselines

    metrics = json.loads((out / "run" / "metrics.json").read_text())
    assert metrics["n_test"] == 10_000 and metrics["step"] == 6 * 27
    assert any((out / "run" / "checkpoints").glob("step-*/manifest.json"))
    logistic, frequencies = classification_baselines(open_store(out / "airline-classes.zarr"))
    assert logistic["model"] == "logistic regression"
    assert metrics["test_nll"] < logistic["test_nll"] and metrics["test_nll"] < frequencies["test_nll"] - 0.1
    assert metrics["test_error"] < logistic["test_error"] < frequencies["test_error"]
    assert "pep multiclass-sep (M=100 per class," in stdout and "2 workers)" in stdout  # rich may wrap the name
    assert f"{metrics['test_error']:.4f}" in stdout and f"{metrics['test_nll']:.4f}" in stdout
    assert f"{logistic['test_nll']:.4f}" in stdout and stderr.count("compiling the training step") == 1
    assert re.search(r"^run directory \S*pep-demo/run: checkpoints/, learning_curve\.png, metrics\.json "
                     r"\([0-9.]+ s in all\)$", stdout, re.MULTILINE)  # one line, unwrapped where stdout is a pipe
