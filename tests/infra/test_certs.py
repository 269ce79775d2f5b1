"""``pep cluster certs DIR``: a CA and certificates that verify against it, private keys only for their
owner, no silent overwrite."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

BIN = Path(sys.executable).parent


def pep(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pep"), *arguments], capture_output=True, text=True, timeout=60)


def test_certs_are_signed_by_the_ca_with_their_roles_and_private_keys(tmp_path):
    done = pep("cluster", "certs", str(tmp_path / "certs"), "--host", "node1.example.org", "--host", "10.1.2.3",
               "--json")
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    ca = x509.load_pem_x509_certificate(Path(paths["ca"]).read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for role, usages in (("cluster", {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}),
                         ("client", {ExtendedKeyUsageOID.CLIENT_AUTH})):
        certificate = x509.load_pem_x509_certificate(Path(paths[f"{role}_cert"]).read_bytes())
        certificate.verify_directly_issued_by(ca)  # raises unless the CA signed it
        assert set(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == usages
        assert stat.S_IMODE(Path(paths[f"{role}_key"]).stat().st_mode) == 0o600
    names = x509.load_pem_x509_certificate(Path(paths["cluster_cert"]).read_bytes()).extensions \
        .get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "node1.example.org"}
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.1.2.3"}
    assert stat.S_IMODE((tmp_path / "certs" / "ca-key.pem").stat().st_mode) == 0o600


def test_existing_certificates_are_kept_unless_overwrite(tmp_path):
    assert pep("cluster", "certs", str(tmp_path)).returncode == 0
    before = (tmp_path / "ca.pem").read_bytes()
    refused = pep("cluster", "certs", str(tmp_path))
    assert refused.returncode == 2 and "use --overwrite" in refused.stderr
    assert (tmp_path / "ca.pem").read_bytes() == before
    assert pep("cluster", "certs", str(tmp_path), "--overwrite").returncode == 0
    assert (tmp_path / "ca.pem").read_bytes() != before
