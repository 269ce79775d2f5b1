"""``--cluster slurm:N`` / ``pbs:N``: dask-jobqueue with infra/jobqueue.yaml. The SLURM and PBS job
scripts pep would submit are rendered and checked, and the SLURM one is run (without a queue: it is a
shell script) to show that the worker it starts joins pep's scheduler over TLS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("dask_jobqueue", reason="needs the infra extra: pip install -e '.[infra]'")

import dask  # noqa: E402

from pep_gp.flows.cluster import make_certificates  # noqa: E402
from pep_gp.pipeline.engine.clusters import jobqueue_cluster
from pep_gp.pipeline.engine import parse_cluster  # noqa: E402
from pep_gp.pipeline.errors import InputError  # noqa: E402
from tests.infra.loopback import Processes, leftovers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def dotted(tree: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}`` (dask.config.set replaces whole sub-trees otherwise)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.fixture
def certs(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "certs"
    make_certificates(directory)
    monkeypatch.setenv("PEP_CERTS", str(directory))
    return directory


def infra_config(**overrides) -> dict:
    """infra/jobqueue.yaml as Dask reads it (``${PEP_CERTS}`` expanded), plus ``overrides``."""
    loaded = dask.config.expand_environment_variables(yaml.safe_load((ROOT / "infra/jobqueue.yaml").read_text()))
    return {**dotted(loaded), **overrides}


def rendered(system: str) -> tuple[str, str]:
    """(job script, scheduler address) of the cluster pep makes for ``system`` (interface: loopback)."""
    with dask.config.set(infra_config(**{f"jobqueue.{system}.interface": "lo"})):
        cluster = jobqueue_cluster(system)
        try:
            return cluster.job_script(), cluster.scheduler_address
        finally:
            cluster.close()


def test_slurm_and_pbs_are_cluster_values():
    assert parse_cluster("slurm:8") == ("slurm", 8) and parse_cluster("pbs:2") == ("pbs", 2)
    with pytest.raises(InputError, match="expected"):
        parse_cluster("slurm:0")


@pytest.mark.parametrize("system, header", [
    ("slurm", ["#SBATCH -J pep-worker", "#SBATCH -n 1", "#SBATCH --cpus-per-task=1", "#SBATCH --mem=4G",
               "#SBATCH -t 04:00:00", "#SBATCH --requeue"]),
    ("pbs", ["#PBS -N pep-worker", "#PBS -l select=1:ncpus=1:mem=4096MB", "#PBS -l walltime=04:00:00",
             "#PBS -r y"]),
])
def test_the_job_script_runs_one_single_threaded_tls_worker(certs, system, header):
    script, address = rendered(system)
    lines = script.splitlines()
    assert address.startswith("tls://127.0.0.1:")
    assert all(line in lines for line in header), script
    assert "export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1" in lines
    assert "export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_=1000000000" in lines
    (command,) = [line for line in lines if "distributed.cli.dask_worker" in line]
    words = command.split()
    assert words[words.index("distributed.cli.dask_worker") + 1] == address
    options = {word: words[i + 1] for i, word in enumerate(words[:-1]) if word.startswith("--")}
    assert options["--nthreads"] == "1" and options["--interface"] == "lo" and options["--protocol"] == "tls://"
    assert options["--tls-ca-file"] == str(certs / "ca.pem") and options["--tls-cert"] == str(certs / "worker.pem")
    assert options["--tls-key"] == str(certs / "worker-key.pem")
    assert options["--dashboard-address"] == "127.0.0.1:0" and "--nanny" in words


def test_the_slurm_job_script_starts_a_worker_that_joins_over_tls(certs, tmp_path):
    from distributed import Client

    processes = Processes(tmp_path / "logs", {})
    with dask.config.set(infra_config(**{"jobqueue.slurm.interface": "lo"})):
        cluster = jobqueue_cluster("slurm")
        try:
            job = tmp_path / "job.sh"
            job.write_text(cluster.job_script())
            processes.start("job", shutil.which("bash"), str(job))  # what sbatch would run on a node
            with Client(cluster, timeout=30) as client:
                client.wait_for_workers(1, timeout=120)
                (worker,) = client.scheduler_info()["workers"]
                assert worker.startswith("tls://127.0.0.1:")
                assert client.submit(sum, [1, 2, 3]).result(timeout=60) == 6
        finally:
            processes.stop_all()
            cluster.close()
    assert not leftovers(processes.token)


def test_the_cluster_is_refused_without_an_interface_or_certificates(certs, monkeypatch):
    with dask.config.set(infra_config()), pytest.raises(InputError, match="interface"):
        jobqueue_cluster("slurm")
    monkeypatch.setenv("PEP_CERTS", str(certs.parent / "nowhere"))
    with dask.config.set(infra_config(**{"jobqueue.pbs.interface": "lo"})), pytest.raises(InputError, match="TLS"):
        jobqueue_cluster("pbs")


def test_site_settings_reach_the_job_script(certs):
    """``account`` and ``queue`` (empty in the shipped file) become the scheduler's own directives."""
    overrides = {"jobqueue.slurm.interface": "lo", "jobqueue.slurm.account": "proj123", "jobqueue.slurm.queue": "compute"}
    with dask.config.set(infra_config(**overrides)):
        cluster = jobqueue_cluster("slurm")
        try:
            lines = cluster.job_script().splitlines()
        finally:
            cluster.close()
    assert "#SBATCH -A proj123" in lines and "#SBATCH -p compute" in lines


SBATCH = ROOT / "infra/pep-train.sbatch"


def test_the_training_job_script_requeues_itself_before_its_walltime():
    script = SBATCH.read_text()
    directives = [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert "--requeue" in directives and any(d.startswith("--time=") for d in directives)
    (signal,) = [d for d in directives if d.startswith("--signal=")]
    assert signal.startswith("--signal=B:USR1@")  # to the batch shell, which traps it
    assert "trap 'scontrol requeue \"$SLURM_JOB_ID\"' USR1" in script
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0


@pytest.mark.exhaustive
@pytest.mark.slow
def test_the_training_job_script_resumes_a_requeued_run_to_the_same_parameters(tmp_path):
    """The job script run as SLURM would run it (``bash``), twice, on a small store: cut short after 3 steps
    (as a walltime would) and started again, it resumes and ends with the parameters of an uninterrupted
    run, bit for bit (``PEP_CLUSTER=none``: no queue here)."""
    import json

    import numpy as np

    venv = Path(sys.executable).parent.parent
    x = np.random.default_rng(0).normal(size=(200, 2))
    np.savez(tmp_path / "t.npz", X=x, y=(x[:, 0] * x[:, 1] > 0).astype(int))
    pep = str(venv / "bin" / "pep")
    subprocess.run([pep, "ingest", "npz", "--input", str(tmp_path / "t.npz"), "--out", str(tmp_path / "t.zarr"),
                    "--quiet"], check=True, timeout=300)

    def job(run_dir: Path, steps: int) -> None:
        env = {**os.environ, "PEP_VENV": str(venv), "PEP_CERTS": str(tmp_path), "PEP_DATA": str(tmp_path / "t.zarr"),
               "PEP_RUN_DIR": str(run_dir), "PEP_CLUSTER": "none",
               "PEP_TRAIN_ARGS": f"--max-steps {steps} --batch-size 64 --quiet"}
        done = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]

    def final_leaves(run_dir: Path) -> dict:
        (manifest,) = sorted(run_dir.glob("checkpoints/step-*/manifest.json"))[-1:]
        return json.loads(manifest.read_text())["leaves"]

    job(tmp_path / "requeued", 3)
    assert final_leaves(tmp_path / "requeued") != {}
    job(tmp_path / "requeued", 6)  # started again: resumes from step 3
    job(tmp_path / "whole", 6)
    assert sorted(tmp_path.glob("requeued/checkpoints/step-*"))[-1].name == "step-00000006"
    assert final_leaves(tmp_path / "requeued") == final_leaves(tmp_path / "whole")
