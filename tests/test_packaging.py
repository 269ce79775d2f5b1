"""One import root: pep installs as ``pep_gp`` (``pep_gp.core``, ``pep_gp.pipeline``, ``pep_gp.flows``) and
claims no generic top-level name, so a user's own ``pipeline.py`` or Prefect ``flows/`` folder and pep
import side by side."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "pep_gp"


def packages_on_disk() -> set[str]:
    return {".".join(("pep_gp", *init.parent.relative_to(PACKAGE).parts)) for init in PACKAGE.rglob("__init__.py")}


def imported_from(path_entry: Path | None, cwd: Path) -> Path:
    """Where ``import pep_gp.core`` finds the package in a fresh interpreter (``path_entry`` first on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path_entry is not None:
        env["PYTHONPATH"] = str(path_entry)
    out = subprocess.run([sys.executable, "-c", "import pep_gp.core; print(pep_gp.core.__file__)"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


ONE_BUILDER = pytest.mark.xdist_group("wheel")
"""The tests of the built wheel run on one test worker: pip builds a local tree in place (its ``build/``), and two
workers building at once collided there ("File exists: build/bdist.linux-x86_64/wheel/pep_gp-0.1.0.dist-info")."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT),
                    "-w", str(folder)], check=True, timeout=600)
    (built,) = folder.glob("pep_gp-*.whl")
    return built


def test_src_is_the_only_package_tree():
    """The folder is the import name: one ``package-dir`` entry, packages found under ``src/``."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "src"}
    assert setuptools["packages"] == {"find": {"where": ["src"]}}
    assert {"pep_gp.core", "pep_gp.pipeline.training", "pep_gp.flows"} <= packages_on_disk()
    outside = [init.parent.name for init in ROOT.glob("*/__init__.py")]
    assert sorted(outside) == ["benchmarks", "docs", "tests"]  # scripts and tests, never installed


def test_the_editable_install_imports_the_source_tree(tmp_path):
    assert imported_from(None, tmp_path) == PACKAGE / "core" / "__init__.py"


@pytest.mark.heavy
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


@ONE_BUILDER
def test_the_built_wheel_holds_every_package_under_the_root_and_imports(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"pep_gp"}
    assert {f"{p.replace('.', '/')}/__init__.py" for p in packages_on_disk()} <= set(names)
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    assert imported_from(tmp_path / "site", tmp_path) == tmp_path / "site" / "pep_gp" / "core" / "__init__.py"


@ONE_BUILDER
def test_the_wheel_ships_the_deployments_and_every_cluster_recipe(wheel):
    """infra/ and prefect.yaml live at the repository root (where Docker, kubectl and ``prefect deploy`` look)
    and reach the package through the links ``src/pep_gp/infra`` and ``src/pep_gp/deploy/prefect.yaml``: a
    non-editable install ships them byte for byte (``importlib.resources.files("pep_gp.infra")``)."""
    tracked = subprocess.run(["git", "ls-files", "infra", "prefect.yaml"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert "prefect.yaml" in tracked and "infra/k8s/pep-data.yaml" in tracked
    shipped = {name: f"pep_gp/deploy/{name}" if name == "prefect.yaml" else f"pep_gp/{name}" for name in tracked}
    with zipfile.ZipFile(wheel) as archive:
        for name, inside in shipped.items():
            assert archive.read(inside) == (ROOT / name).read_bytes(), name


def test_the_lowest_stage_pins_every_requirement_to_a_version_it_allows():
    """``.ci/run``'s ``lowest`` stage installs each direct dependency at the lower bound ``.ci/lowest.py`` reads
    from pyproject.toml: every requirement has one, and it is a version its own specifier accepts."""
    from packaging.requirements import Requirement

    extras = ("test", "infra", "docs")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in
                    project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]]
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "lowest.py"), *extras], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    pins = dict(line.split("==") for line in out)
    assert set(pins) == {r.name for r in requirements}
    for requirement in requirements:
        assert requirement.specifier.contains(pins[requirement.name], prereleases=False), (requirement, pins)


def core_distributions() -> set[str]:
    """The distributions ``pip install -e .`` installs: pep-gp's requirements without extras, and theirs, with the
    extras they name (normalised names; one whose marker excludes this platform is not installed, nor followed)."""
    from importlib.metadata import PackageNotFoundError, distribution
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, todo = set(), [("pep-gp", "")]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for requirement in map(Requirement, requires):
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                child = canonicalize_name(requirement.name)
                todo += [(child, ""), *((child, wanted) for wanted in requirement.extras)]
    return {name for name, _ in seen}


def imported_at_import_time(tree: ast.AST) -> set[str]:
    """The top-level names a module imports when it is imported: not inside a function, nor under
    ``if TYPE_CHECKING:``, nor in a ``try`` that catches ``ImportError`` (an optional import)."""
    names = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Try) and any("ImportError" in ast.unparse(h.type or ast.Name("")) for h in node.handlers):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
        names |= imported_at_import_time(node)
    return names


@pytest.mark.heavy
def test_every_module_imports_only_what_the_plain_install_brings():
    """What ``pip install -e .`` installs (the README's main job) is all that any module of pep imports when it is
    imported; a package of an extra (tracking, infra, bench) is imported inside the function that needs it. (The
    main job itself runs verbatim in a fresh environment with ``-m exhaustive``, tests/test_docs_commands.py.)"""
    from importlib.metadata import packages_distributions
    from packaging.utils import canonicalize_name

    core, providers = core_distributions(), packages_distributions()
    assert {"jax", "zarr", "prefect", "scikit-learn", "matplotlib"} <= core and "mlflow" not in core
    outside = {}
    for path in PACKAGE.rglob("*.py"):
        for name in imported_at_import_time(ast.parse(path.read_text())) - set(sys.stdlib_module_names) - {"pep_gp"}:
            if not any(canonicalize_name(d) in core for d in providers.get(name, ())):
                outside.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not outside, outside
