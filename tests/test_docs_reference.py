"""The reference pages are generated from the code (``python -m docs.generate``): they regenerate
byte-identically, and they name every ``pep`` option, every config key and every estimator argument."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from docs import generate
from pep_gp.flows.cli import build_app
from pep_gp.pipeline.estimators.base import FIT_FIELDS
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.runs.config import TrainConfig

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"


def commands(command, path="pep"):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from commands(sub, f"{path} {name}")
    else:
        yield path, command


@pytest.mark.parametrize("name", sorted(generate.PAGES))
def test_each_reference_page_is_what_the_code_generates(name):
    assert (REFERENCE / name).read_text() == generate.PAGES[name](), "run python -m docs.generate"


def test_the_cli_page_names_every_command_and_option():
    text = (REFERENCE / "cli.md").read_text()
    found = list(commands(typer.main.get_command(build_app())))
    assert {path for path, _ in found} >= {"pep ingest", "pep train", "pep evaluate", "pep predict", "pep demo",
                                           "pep cluster certs"}
    for path, command in found:
        section = text[text.index(f"## `{path}`"):]
        section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
        for param in command.params:
            for option in [*param.opts, *param.secondary_opts]:
                if option != "--help":
                    assert f"`{option}`" in section, (path, option)


def test_the_config_page_names_every_key_of_every_model():
    text = (REFERENCE / "config.md").read_text()
    for name in TrainConfig.model_fields:
        assert name == "model" or f"| `{name}` |" in text
    for spec in MODELS.values():
        section = text[text.index(f"`{spec.name}`", text.index("## The `[model]` table")):]
        for key in spec.Settings.model_fields:
            assert f"| `{key}` |" in section, (spec.name, key)


def test_the_estimators_page_names_every_argument_of_every_estimator():
    text = (REFERENCE / "estimators.md").read_text()
    for cls in generate.estimator_classes():
        section = text[text.index(f"## `{cls.__name__}`"):]
        for name in inspect.signature(cls).parameters:
            assert f"| `{name}` |" in section.split("\n## ")[0], (cls.__name__, name)


def test_every_fit_field_is_described():
    assert set(generate.FIT_FIELD_HELP) == set(FIT_FIELDS)


def test_the_readme_holds_the_registry_s_model_table():
    from pep_gp.pipeline.estimators.models import model_table

    assert f"<!-- generated: models -->\n{model_table()}\n<!-- /generated -->" in generate.README.read_text()
    assert generate.readme() == generate.README.read_text()


def test_the_check_command_fails_on_a_stale_page_and_the_command_rewrites_it(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "REFERENCE", tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(generate.README.read_text())
    monkeypatch.setattr(generate, "README", readme)
    assert generate.main(["--check"]) == 1  # no pages at all
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    (tmp_path / "config.md").write_text((tmp_path / "config.md").read_text().replace("`0.05`", "`0.5`"))
    assert generate.stale_pages() == ["config.md"]


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_check_command_passes_on_the_committed_pages():
    done = subprocess.run([sys.executable, "-m", "docs.generate", "--check"], cwd=REFERENCE.parents[1],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_estimators_page_names_only_models_pep_train_has():
    """Issue 37: the page named `pep train --model collapsed-regressor`, which pep train does not have."""
    named = re.findall(r"`pep train --model ([\w-]+)`", (REFERENCE / "estimators.md").read_text())
    assert named and set(named) <= set(MODELS)
