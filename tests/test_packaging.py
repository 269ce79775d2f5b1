"""One import root: pep installs as ``pep_gp`` (``pep_gp.core``, ``pep_gp.pipeline``, ``pep_gp.flows``) and
claims no generic top-level name, so a user's own ``pipeline.py`` or Prefect ``flows/`` folder and pep
import side by side."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"pep_gp": "pep_gp", "pep_gp.core": "pepcore", "pep_gp.pipeline": "pipeline", "pep_gp.flows": "flows"}
DATA = {"pep_gp.infra": "infra", "pep_gp.deploy": "."}  # files without Python shipped in the wheel


def packages_on_disk() -> set[str]:
    found = set()
    for package, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    return found


def test_every_folder_with_an_init_is_a_listed_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {**FOLDERS, **DATA}
    assert set(setuptools["packages"]) == packages_on_disk() | set(DATA)


def test_a_users_pipeline_module_and_flows_folder_live_beside_pep(tmp_path):
    """The user's script sits beside a ``pipeline.py`` and a Prefect-style ``flows/`` folder (no
    ``__init__.py``); both are the user's, and pep's estimators, store reader and CLI import too."""
    (tmp_path / "pipeline.py").write_text("OWNER = 'user pipeline'\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "etl.py").write_text("OWNER = 'user flows'\n")
    (tmp_path / "main.py").write_text(
        "import pipeline\n"
        "from flows import etl\n"
        "import pep_gp\n"
        "from pep_gp import SparseGPClassifier\n"
        "from pep_gp.pipeline.data.stores import open_store\n"
        "from pep_gp.flows.cli import build_app\n"
        "print(pipeline.OWNER, '|', etl.OWNER, '|', SparseGPClassifier.__module__, '|', open_store.__module__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" | ") == ["user pipeline", "user flows", "pep_gp.pipeline.estimators.models",
                                       "pep_gp.pipeline.data.stores\n"]


@pytest.mark.slow
def test_the_built_wheel_holds_every_package_under_the_root(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
                   check=True, timeout=600)
    (wheel,) = tmp_path.glob("pep_gp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"pep_gp"}
    assert {f"{p.replace('.', '/')}/__init__.py" for p in packages_on_disk()} <= set(names)
    # A non-editable install ships the Prefect deployments and every cluster recipe, byte for byte.
    tracked = subprocess.run(["git", "ls-files", "infra", "prefect.yaml"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert "prefect.yaml" in tracked and "infra/k8s/pep-data.yaml" in tracked
    shipped = {name: f"pep_gp/deploy/{name}" if name == "prefect.yaml" else f"pep_gp/{name}" for name in tracked}
    with zipfile.ZipFile(wheel) as archive:
        for name, inside in shipped.items():
            assert archive.read(inside) == (ROOT / name).read_bytes(), name
