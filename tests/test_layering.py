"""The package's import graph: layers import downwards only (flows → pipeline → core), no module imports
a module that imports it back, and inside the pipeline models, data and the engine sit below run directories
(``runs``), which sit below training and the estimators."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "pep_gp"
LAYERS = ("core", "pipeline", "flows")


def modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in (PACKAGE / layer).rglob("*.py"):
            parts = path.relative_to(PACKAGE).with_suffix("").parts
            found[".".join(("pep_gp", *parts)).removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The pep_gp modules ``name`` imports at module level or inside functions (relative ones resolved)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                targets.add(candidate if candidate in known else base)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    return {target for target in targets if target in known and target != name}


def test_no_module_imports_a_module_that_imports_it_back_and_layers_point_down():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    cycles = sorted((a, b) for a, targets in graph.items() for b in targets if a < b and a in graph[b])
    assert not cycles
    upward = sorted((a, b) for a, targets in graph.items() for b in targets
                    if (a.startswith("pep_gp.core") and not b.startswith("pep_gp.core"))
                    or (a.startswith("pep_gp.pipeline") and b.startswith("pep_gp.flows"))
                    or (a.startswith(("pep_gp.pipeline.models", "pep_gp.pipeline.data", "pep_gp.pipeline.engine"))
                        and b.startswith(("pep_gp.pipeline.training", "pep_gp.pipeline.runs")))
                    or (a.startswith("pep_gp.pipeline.runs")
                        and b.startswith(("pep_gp.pipeline.training", "pep_gp.pipeline.estimators"))))
    assert not upward
    assert len(graph) > 60 and sum(map(len, graph.values())) > 150  # the graph was read


MODEL_FITS = ("pep_gp.pipeline.training.class_groups", "pep_gp.pipeline.training.exact_ep",
              "pep_gp.pipeline.training.multiclass_ep")
"""The training modules that are one model's own step or fit (multi-class SEP's class-parallel step, the exact
GP's EP, multi-class EP), beside the trainer as GPJax's ``fit_scipy`` is beside ``fit``: they may import it."""


def test_training_imports_no_concrete_model():
    """Issue 64: the trainer imported ``MultiClassGP`` for one ``isinstance``; the loop asks the spec instead
    (:func:`~pep_gp.pipeline.models.protocol.spreads_classes`), and nothing under training/ but a model's own
    fit imports from ``pep_gp.core.models``."""
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()
             if name.startswith("pep_gp.pipeline.training")}
    concrete = sorted((a, b) for a, targets in graph.items() for b in targets
                      if b.startswith("pep_gp.core.models") and a not in MODEL_FITS)
    assert not concrete
    assert all(any(b.startswith("pep_gp.core.models") for b in graph[fit]) for fit in MODEL_FITS)  # each exemption used
    assert "pep_gp.pipeline.training.trainer" in graph and len(graph) > 15  # the package was read


def test_one_place_writes_a_run_manifest():
    """Issue 64: the trainer and ``estimator.save`` each built and wrote a manifest (the estimator filling
    placeholder loop fields). Every checkpoint is written by ``checkpoint.save``, and the one call of it in the
    package is :meth:`~pep_gp.pipeline.runs.manifest.RunManifest.write`; only checkpoint.py names the file."""
    writers, named = [], []
    for name, path in modules().items():
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "save"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "checkpoint"):
                writers.append(name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("checkpoint"):
                assert "save" not in {alias.name for alias in node.names}, name  # no call under another name
        if '"manifest.json"' in text:
            named.append(name)
    assert writers == ["pep_gp.pipeline.runs.manifest"]
    assert named == ["pep_gp.pipeline.runs.checkpoint"]


TRAINER_LINES = 300
"""Issue 64: the trainer is the loop; the resume rules (``runs.resume``), the manifest (``runs.manifest``) and the
class-parallel state (``training.class_parallel``) live in their own modules."""


def test_the_trainer_is_the_loop():
    """``trainer.py`` had grown to 609 lines (issue 64): it stays within :data:`TRAINER_LINES`, and its
    ``Trainer`` takes its resume rules from ``runs.resume`` and builds no manifest itself."""
    path = PACKAGE / "pipeline" / "training" / "trainer.py"
    text = path.read_text()
    assert len(text.splitlines()) <= TRAINER_LINES
    imported = imports("pep_gp.pipeline.training.trainer", path, set(modules()))
    assert "pep_gp.pipeline.runs.resume" in imported and "pep_gp.pipeline.runs.manifest" not in imported
