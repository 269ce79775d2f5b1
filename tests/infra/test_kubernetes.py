"""infra/k8s: the dask-kubernetes operator's ``DaskCluster`` and the Prefect worker Deployment, validated
against the operator's own CRD schema and Kubernetes' API schemas (``kubernetes-validate``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes_validate", reason="needs the infra extra: pip install -e '.[infra]'")
pytest.importorskip("dask_kubernetes", reason="needs the infra extra: pip install -e '.[infra]'")

import jsonschema  # noqa: E402  (installed with kubernetes-validate)
import kubernetes_validate  # noqa: E402
from dask_kubernetes.operator import make_cluster_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
K8S = kubernetes_validate.utils.latest_version()


def documents(name: str) -> list[dict]:
    return list(yaml.safe_load_all((ROOT / "infra/k8s" / name).read_text()))


def operator_schema(kind: str) -> dict:
    """The openAPIV3Schema of the operator's CRD for ``kind``, from the Helm chart in dask-kubernetes."""
    import dask_kubernetes

    chart = Path(dask_kubernetes.__file__).parent / "operator/deployment/helm/dask-kubernetes-operator/crds"
    crd = yaml.safe_load((chart / f"{kind.lower()}.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def validate_core(document: dict) -> None:
    """kubernetes-validate, strict: unknown fields are errors too."""
    kubernetes_validate.validate(document, K8S, strict=True)


@pytest.fixture(scope="module")
def dask_cluster() -> dict:
    (cluster,) = documents("dask-cluster.yaml")
    return cluster


def test_the_dask_cluster_is_a_valid_operator_resource(dask_cluster):
    rendered = make_cluster_spec("pep", image="pep:latest", n_workers=4)  # what the operator's API makes
    assert (dask_cluster["apiVersion"], dask_cluster["kind"]) == (rendered["apiVersion"], rendered["kind"])
    assert dask_cluster["spec"]["scheduler"]["service"]["selector"] == rendered["spec"]["scheduler"]["service"]["selector"]
    jsonschema.validate(dask_cluster, operator_schema("DaskCluster"))
    scheduler, worker = dask_cluster["spec"]["scheduler"], dask_cluster["spec"]["worker"]
    for role, pod_spec in (("scheduler", scheduler["spec"]), ("worker", worker["spec"])):
        validate_core({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pep-{role}"}, "spec": pod_spec})
    validate_core({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pep-scheduler"},
                   "spec": scheduler["service"]})


def test_a_broken_manifest_is_caught(dask_cluster):
    broken = yaml.safe_load(yaml.safe_dump(dask_cluster))
    broken["spec"]["worker"]["replicas"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, operator_schema("DaskCluster"))
    for field, value in (("imagePullPolicy", 3), ("argz", ["dask", "worker"])):  # a wrong type, an unknown field
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
               "spec": yaml.safe_load(yaml.safe_dump(dask_cluster["spec"]["worker"]["spec"]))}
        pod["spec"]["containers"][0][field] = value
        with pytest.raises(kubernetes_validate.ValidationError):
            validate_core(pod)


def test_workers_and_scheduler_use_tls_the_documented_settings_and_loopback_dashboards(dask_cluster):
    (scheduler,) = dask_cluster["spec"]["scheduler"]["spec"]["containers"]
    (worker,) = dask_cluster["spec"]["worker"]["spec"]["containers"]
    service_name = f"{dask_cluster['metadata']['name']}-scheduler"  # the operator's name for the Service
    assert worker["args"][:3] == ["dask", "worker", f"tls://{service_name}:8786"]
    for role, container, pod in (("scheduler", scheduler, dask_cluster["spec"]["scheduler"]["spec"]),
                                 ("worker", worker, dask_cluster["spec"]["worker"]["spec"])):
        args = container["args"]
        assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(args)
        assert args[args.index("--tls-key") + 1] == f"/etc/pep-tls/{role}-key.pem"  # a key per role
        (tls,) = [volume for volume in pod["volumes"] if volume["name"] == "tls"]
        assert tls["secret"]["secretName"] == f"pep-dask-{role}-tls"
        assert args[args.index("--dashboard-address") + 1].startswith("127.0.0.1:")
        assert {"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"} in container["env"]
    assert scheduler["args"][scheduler["args"].index("--protocol") + 1] == "tls"
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert env["OPENBLAS_NUM_THREADS"] == "1" and worker["args"][worker["args"].index("--nthreads") + 1] == "1"
    assert env["DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_"] == "1000000000"


def test_the_prefect_worker_deployment_is_valid_and_trains_over_tls():
    config_map, deployment = documents("prefect-worker.yaml")
    for document in (config_map, deployment):
        validate_core(document)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "prefect worker start --pool pep" in container["args"][0]
    assert "prefect --no-prompt deploy --all" in container["args"][0]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["PEP_DASK_SCHEDULER"] == "tls://pep-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"].endswith("/client.pem")
    assert config_map["data"]["PREFECT_API_URL"].startswith("https://")
    (auth,) = [item for item in container["env"] if item["name"] == "PREFECT_API_AUTH_STRING"]
    assert auth["valueFrom"]["secretKeyRef"] == {"name": "pep-prefect-auth", "key": "auth-string"}
    (tls,) = [volume for volume in deployment["spec"]["template"]["spec"]["volumes"] if volume["name"] == "tls"]
    assert tls["secret"]["secretName"] == "pep-dask-client-tls"
