"""The Prefect flow ``ingest`` on a real Prefect test server: result, artifact, retry condition."""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.states import Failed

from pep_gp.flows.ingest import artifact_key, ingest_flow, is_transient
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.data.stores import open_store
from tests import datafiles

pytestmark = pytest.mark.usefixtures("prefect_harness")  # runs flows: one Prefect server


def test_flow_ingests_and_publishes_a_keyed_artifact(tmp_path):
    out = tmp_path / "Wine Set.zarr"
    summary = ingest_flow("sklearn:wine", str(out), seed=5)
    assert (summary["rows_train"], summary["rows_test"], summary["n_classes"]) == (142, 36, 3)
    assert open_store(out).checksum == summary["checksum"]
    key = artifact_key(str(out))
    assert key == "ingest-wine-set-zarr"
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert artifacts and "| rows (train / test) | 142 / 36 |" in artifacts[0].data


def test_flow_fails_on_bad_input_without_retry_and_leaves_nothing(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,label\n1,2,0\n3,x,1\n")
    with pytest.raises(InputError, match=r"t.csv: line 3, column 'b': expected a number, found 'x'"):
        ingest_flow("csv", str(tmp_path / "s.zarr"), [str(tmp_path / "t.csv")], "label")
    assert datafiles.listing(tmp_path) == {"t.csv"}


def test_retry_condition_retries_io_errors_only():
    assert is_transient(None, None, Failed(data=OSError("connection reset")))
    assert is_transient(None, None, Failed(data=TimeoutError()))
    assert not is_transient(None, None, Failed(data=InputError("t.csv: line 3 …")))
    assert not is_transient(None, None, Failed(data=KeyError("bug")))
