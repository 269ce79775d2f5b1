"""prefect.yaml and infra/ files are well-formed and point at real flows (what can be checked offline)."""

from __future__ import annotations

import importlib
from pathlib import Path

import yaml
from prefect import Flow

ROOT = Path(__file__).resolve().parents[2]


def test_every_deployment_entrypoint_is_a_namespaced_flow_of_the_installed_package():
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = set()
    for deployment in config["deployments"]:
        module, name = deployment["entrypoint"].rsplit(".", 1)
        assert module.startswith("pep_gp.flows."), deployment["entrypoint"]
        flow = getattr(importlib.import_module(module), name)
        assert isinstance(flow, Flow) and deployment["work_pool"]["name"] == "pep"
        names.add(flow.name)
    assert names == {"pep-ingest", "pep-train", "pep-evaluate", "pep-predict", "pep-pipeline"}


def test_infra_files_parse_and_reference_the_image():
    compose = yaml.safe_load((ROOT / "infra/docker-compose.yml").read_text())
    assert {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"} <= set(compose["services"])
    for service in compose["services"].values():
        assert (ROOT / service["build"]["dockerfile"]).exists()
    kinds = [doc["kind"] for name in ("dask-cluster.yaml", "prefect-worker.yaml")
             for doc in yaml.safe_load_all((ROOT / "infra/k8s" / name).read_text())]
    assert kinds == ["DaskCluster", "ConfigMap", "Deployment"]
