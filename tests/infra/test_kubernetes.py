"""infra/k8s: the dask-kubernetes operator's ``DaskCluster`` and the Prefect worker Deployment, validated
against the operator's own CRD schema and Kubernetes' API schemas (``kubernetes-validate``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes_validate", reason="needs the infra extra: pip install -e '.[infra]'")
pytest.importorskip("dask_kubernetes", reason="needs the infra extra: pip install -e '.[infra]'")

import jsonschema  # noqa: E402  (installed with kubernetes-validate)
import kubernetes_validate  # noqa: E402
from dask_kubernetes.operator import make_cluster_spec  # noqa: E402

pytestmark = pytest.mark.infra  # real processes or the cluster tools' validators: the infra tier

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
        assert {"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"} in container["env"]
    assert worker["args"][worker["args"].index("--dashboard-address") + 1].startswith("127.0.0.1:")
    # The scheduler's HTTP port serves the autoscaler (autoscaler.yaml's NetworkPolicy admits only the operator).
    assert scheduler["args"][scheduler["args"].index("--dashboard-address") + 1] == ":8787"
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


def test_the_autoscaler_scales_the_cluster_and_only_the_operator_reaches_the_scheduler_s_http_port(dask_cluster):
    autoscaler, policy = documents("autoscaler.yaml")
    jsonschema.validate(autoscaler, operator_schema("DaskAutoscaler"))
    assert autoscaler["spec"]["cluster"] == dask_cluster["metadata"]["name"]
    assert 1 <= autoscaler["spec"]["minimum"] <= autoscaler["spec"]["maximum"]  # pep waits for one worker
    validate_core(policy)
    service = dask_cluster["spec"]["scheduler"]["service"]
    assert policy["spec"]["podSelector"]["matchLabels"] == service["selector"]
    (http,) = [port for port in service["ports"] if port["name"] == "http-dashboard"]  # the operator's port name
    (operator_rule,) = [rule for rule in policy["spec"]["ingress"] if any("namespaceSelector" in f for f in rule["from"])]
    assert operator_rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dask-operator"}}}]
    assert operator_rule["ports"] == [{"protocol": "TCP", "port": http["port"]}]
    (scheduler,) = dask_cluster["spec"]["scheduler"]["spec"]["containers"]
    routes = {item["name"]: item["value"] for item in scheduler["env"]}["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"]
    assert "distributed.http.scheduler.api" in routes  # GET /api/v1/adaptive_target, what the autoscaler reads
    assert dask_cluster["spec"]["worker"]["replicas"] == autoscaler["spec"]["minimum"]


def test_the_data_volume_is_defined_shared_and_mounted_by_every_pod(dask_cluster):
    claim, shell = documents("pep-data.yaml")
    validate_core(claim)
    validate_core(shell)
    assert claim["metadata"]["name"] == "pep-data" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    _, deployment = documents("prefect-worker.yaml")
    pods = [dask_cluster["spec"]["worker"]["spec"], deployment["spec"]["template"]["spec"], shell["spec"],
            rendered_job()["spec"]["template"]["spec"]]
    for pod in pods:
        (data,) = [volume for volume in pod["volumes"] if volume["name"] == "data"]
        assert data["persistentVolumeClaim"]["claimName"] == "pep-data"
        (container,) = pod["containers"]
        assert {"name": "data", "mountPath": "/work"} in container["volumeMounts"]


TEMPLATE = ROOT / "infra/k8s/work-pool-template.json"
PLACEHOLDER = re.compile(r"^\{\{ (\w+) \}\}$")


def rendered_job(**values) -> dict:
    """The work-pool template's Job with each ``{{ variable }}`` replaced as Prefect does: by the value given,
    else the variable's default; keys whose variable has neither are dropped."""
    template = json.loads(TEMPLATE.read_text())
    defaults = {name: spec["default"] for name, spec in template["variables"]["properties"].items() if "default" in spec}
    values = {**defaults, "name": "pep-train-run", "command": "python -m prefect.engine", **values}
    env = values.get("env")
    if isinstance(env, dict):
        values["env"] = [{"name": key, "value": value} for key, value in env.items()]  # the worker's own conversion

    def fill(node):
        if isinstance(node, dict):
            return {key: value for key, value in ((k, fill(v)) for k, v in node.items()) if value is not None}
        if isinstance(node, list):
            return [fill(item) for item in node]
        if isinstance(node, str) and PLACEHOLDER.match(node):
            value = values.get(PLACEHOLDER.match(node).group(1))
            return value.split() if PLACEHOLDER.match(node).group(1) == "command" and value else value
        if isinstance(node, str) and "{{" in node:
            return re.sub(r"\{\{ (\w+) \}\}", lambda m: str(values[m.group(1)]), node)
        return node

    return fill(template["job_configuration"]["job_manifest"])


def test_the_work_pool_template_declares_every_variable_it_uses_and_renders_a_valid_job():
    template = json.loads(TEMPLATE.read_text())
    jsonschema.Draft202012Validator.check_schema(template["variables"])
    declared = set(template["variables"]["properties"])
    used = set(re.findall(r"\{\{ (\w+) \}\}", json.dumps(template["job_configuration"])))
    assert used == declared, (used - declared, declared - used)
    job = rendered_job()
    validate_core(job)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["PEP_DASK_SCHEDULER"] == "tls://pep-scheduler:8786"
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] == "/etc/pep-tls/client-key.pem"
    (tls,) = [volume for volume in job["spec"]["template"]["spec"]["volumes"] if volume["name"] == "tls"]
    assert tls["secret"]["secretName"] == "pep-dask-client-tls" and tls["secret"]["defaultMode"] == 0o400
    broken = rendered_job(finished_job_ttl="an hour")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(broken)


def test_a_scheduler_with_the_manifest_s_routes_serves_the_autoscaler_s_adaptive_target(dask_cluster, tmp_path):
    """A real ``dask scheduler`` with the manifest's HTTP routes answers GET /api/v1/adaptive_target (what the
    operator's autoscaler reads); with Dask's default routes it would answer 404."""
    import urllib.request

    from tests.infra.loopback import Processes, free_port, wait_until

    (scheduler,) = dask_cluster["spec"]["scheduler"]["spec"]["containers"]
    routes = {item["name"]: item["value"] for item in scheduler["env"]}["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"]
    port = free_port()
    processes = Processes(tmp_path, {"DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": routes})

    def target():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/adaptive_target", timeout=2) as answer:
                return json.loads(answer.read())
        except OSError:
            return None

    try:
        processes.start("scheduler", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                        "--dashboard-address", f"127.0.0.1:{port}")
        assert wait_until(target, 60, "the adaptive target") == {"workers": 0}
    finally:
        processes.stop_all()
