"""prefect.yaml and infra/ files are well-formed and point at real flows (what can be checked offline)."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path

import yaml
from prefect import Flow

ROOT = Path(__file__).resolve().parents[2]


def test_every_deployment_entrypoint_is_a_flow():
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = set()
    for deployment in config["deployments"]:
        module, name = deployment["entrypoint"].split(":")
        flow = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), name)
        assert isinstance(flow, Flow) and deployment["work_pool"]["name"] == "pep"
        names.add(flow.name)
    assert names == {"ingest", "train", "evaluate", "pipeline"}


def test_no_module_in_flows_shadows_an_importable_module():
    """A Prefect worker runs an entrypoint as a script with ``flows/`` first on ``sys.path`` (issue 12:
    ``flows/pipeline.py`` shadowed the ``pipeline`` package and every deployment run crashed)."""
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "flows"]
    names = sorted(path.stem for path in (ROOT / "flows").glob("*.py") if path.stem != "__init__")
    assert "end_to_end" in names and "pipeline" not in names
    shadowing = [name for name in names if name in sys.builtin_module_names
                 or importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None]
    assert not shadowing, f"flows/ modules named like importable modules: {shadowing}"


def test_infra_files_parse_and_reference_the_image():
    compose = yaml.safe_load((ROOT / "infra/docker-compose.yml").read_text())
    assert {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"} <= set(compose["services"])
    for service in compose["services"].values():
        assert (ROOT / service["build"]["dockerfile"]).exists()
    kinds = [doc["kind"] for name in ("dask-cluster.yaml", "prefect-worker.yaml")
             for doc in yaml.safe_load_all((ROOT / "infra/k8s" / name).read_text())]
    assert kinds == ["DaskCluster", "ConfigMap", "Deployment"]
