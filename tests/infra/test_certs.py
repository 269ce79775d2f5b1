"""``pep cluster certs DIR``: a CA and certificates that verify against it, one key per role, private keys
only for their owner, the CA's key never in DIR, no silent overwrite."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from pep_gp.flows.cluster import make_certificates

BIN = Path(sys.executable).parent


def pep(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pep"), *arguments], capture_output=True, text=True, timeout=60)


def test_certs_are_signed_by_the_ca_with_their_roles_and_private_keys(tmp_path):
    done = pep("cluster", "certs", str(tmp_path / "certs"), "--host", "node1.example.org", "--host", "10.1.2.3",
               "--ca-key", str(tmp_path / "private" / "ca-key.pem"), "--json")
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    ca = x509.load_pem_x509_certificate(Path(paths["ca"]).read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    served = {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    keys = set()
    for role, usages in (("scheduler", served), ("worker", served), ("client", {ExtendedKeyUsageOID.CLIENT_AUTH})):
        certificate = x509.load_pem_x509_certificate(Path(paths[f"{role}_cert"]).read_bytes())
        certificate.verify_directly_issued_by(ca)  # raises unless the CA signed it
        assert set(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == usages
        assert stat.S_IMODE(Path(paths[f"{role}_key"]).stat().st_mode) == 0o600
        keys.add(certificate.public_key().public_numbers())
    assert len(keys) == 3  # scheduler and workers no longer share one certificate
    for role in ("scheduler", "worker"):
        names = x509.load_pem_x509_certificate(Path(paths[f"{role}_cert"]).read_bytes()).extensions \
            .get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "node1.example.org"}
        assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.1.2.3"}
    # The directory shipped to every node holds no CA key; the one kept elsewhere signed the certificates.
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == [
        "ca.pem", "client-key.pem", "client.pem", "scheduler-key.pem", "scheduler.pem", "worker-key.pem", "worker.pem"]
    assert stat.S_IMODE(Path(paths["ca_key"]).stat().st_mode) == 0o600
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    assert load_pem_private_key(Path(paths["ca_key"]).read_bytes(), None).public_key() == ca.public_key()


def test_the_ca_key_is_not_kept_by_default_nor_in_the_shipped_directory(tmp_path):
    assert pep("cluster", "certs", str(tmp_path / "certs")).returncode == 0
    assert not list(tmp_path.rglob("ca-key*"))
    refused = pep("cluster", "certs", str(tmp_path / "certs"), "--overwrite", "--ca-key",
                  str(tmp_path / "certs" / "ca-key.pem"))
    assert refused.returncode == 2 and "inside" in refused.stderr and "keep the CA's key elsewhere" in refused.stderr


def test_existing_certificates_are_kept_unless_overwrite(tmp_path):
    assert pep("cluster", "certs", str(tmp_path)).returncode == 0
    before = (tmp_path / "ca.pem").read_bytes()
    refused = pep("cluster", "certs", str(tmp_path))
    assert refused.returncode == 2 and "use --overwrite" in refused.stderr
    assert (tmp_path / "ca.pem").read_bytes() == before
    assert pep("cluster", "certs", str(tmp_path), "--overwrite").returncode == 0
    assert (tmp_path / "ca.pem").read_bytes() != before


def test_overwrite_writes_new_keys_of_mode_0600_and_replaces_symlinks_not_their_targets(tmp_path):
    """Issue 37, item 8: ``--overwrite`` kept an old key's mode 0644 and wrote through a symlink."""
    certs = tmp_path / "certs"
    make_certificates(certs)
    (certs / "worker-key.pem").chmod(0o644)
    elsewhere = tmp_path / "elsewhere.pem"
    elsewhere.write_text("not a key")
    (certs / "client-key.pem").unlink()
    (certs / "client-key.pem").symlink_to(elsewhere)
    (certs / "client.pem").unlink()
    (certs / "client.pem").symlink_to(tmp_path / "missing.pem")  # dangling: still an existing file
    with pytest.raises(FileExistsError, match="client.pem"):
        make_certificates(certs)
    make_certificates(certs, overwrite=True)
    for role in ("scheduler", "worker", "client"):
        key = certs / f"{role}-key.pem"
        assert not key.is_symlink() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not (certs / "client.pem").is_symlink() and not (tmp_path / "missing.pem").exists()
    assert elsewhere.read_text() == "not a key"
    assert sorted(p.name for p in certs.iterdir()) == [
        "ca.pem", "client-key.pem", "client.pem", "scheduler-key.pem", "scheduler.pem", "worker-key.pem", "worker.pem"]
