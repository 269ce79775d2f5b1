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
    assert names == {"pep-ingest", "pep-train", "pep-evaluate", "pep-predict", "pep-pipeline", "pep-refresh"}


def test_the_refresh_deployment_is_scheduled_one_run_at_a_time_with_parameters_its_flow_takes():
    """The schedule and parameters prefect.yaml gives ``refresh`` (tests/infra/test_scheduled_refresh.py deploys
    it with a 10 s interval and runs it twice)."""
    import inspect

    from pep_gp.flows.refresh import refresh_run

    (refresh,) = [d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"] if d["name"] == "refresh"]
    assert refresh["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC"}] and refresh["concurrency_limit"] == 1
    assert set(refresh["parameters"]) <= set(inspect.signature(refresh_run).parameters)


def test_infra_files_parse_and_reference_the_image():
    compose = yaml.safe_load((ROOT / "infra/docker-compose.yml").read_text())
    assert {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"} <= set(compose["services"])
    for service in compose["services"].values():
        assert (ROOT / service["build"]["dockerfile"]).exists()
    kinds = [doc["kind"] for name in ("dask-cluster.yaml", "prefect-worker.yaml")
             for doc in yaml.safe_load_all((ROOT / "infra/k8s" / name).read_text())]
    assert kinds == ["DaskCluster", "ConfigMap", "Deployment"]
