"""``pep cluster certs DIR``: a certificate authority and the certificates of a TLS Dask cluster.

Anything that leaves loopback must be encrypted and authenticated. Dask encrypts and authenticates its
connections with TLS when the scheduler, the workers and the clients are given a CA and a certificate
signed by it; every side then refuses a peer whose certificate that CA did not sign (mutual TLS). This
writes, into ``DIR`` (the directory a deployment ships to its pods and containers):

========================================  ==========================================================
``ca.pem``                                the CA's certificate (every side verifies its peers with it)
``scheduler.pem``, ``scheduler-key.pem``  the scheduler (server and client use; the names in ``--host``
                                          plus ``localhost`` and ``127.0.0.1``)
``worker.pem``, ``worker-key.pem``        the workers (server and client use: workers talk to each
                                          other), the same names
``client.pem``, ``client-key.pem``        ``pep train``/``pep evaluate`` and Prefect workers
========================================  ==========================================================

Each role has its own key, so each machine or container gets only the key of its role. The CA's private
key signs certificates; anyone holding it can mint a certificate every side accepts, so it never goes
into ``DIR``: it is written only where ``--ca-key FILE`` says (outside ``DIR``), else not kept at all
(run the command again, with every ``--host``, to add a name). Private keys (ECDSA P-256) are written
with mode 0600. Every file is written as a new file renamed into place, so ``--overwrite`` never keeps an
old key's mode and replaces a symlink rather than writing through it. Start the cluster with them (``infra/README.md``)::

    dask scheduler --protocol tls --tls-ca-file DIR/ca.pem --tls-cert DIR/scheduler.pem --tls-key DIR/scheduler-key.pem ...
    dask worker tls://HOST:8786 --tls-ca-file DIR/ca.pem --tls-cert DIR/worker.pem --tls-key DIR/worker-key.pem ...
    pep train ... --cluster tls://HOST:8786 --tls-ca-file DIR/ca.pem --tls-cert DIR/client.pem --tls-key DIR/client-key.pem
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

CA = "ca"
ROLES = ("scheduler", "worker", "client")
SERVERS = ("scheduler", "worker")  # roles that listen, and carry the cluster's names


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pep"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_fresh(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode`` through a new file: a temporary file in the same directory,
    created with ``O_CREAT | O_EXCL`` and mode 0600 (never an existing file, so never one whose mode an
    older run or another user chose), then renamed over ``path``. A symlink at ``path`` is replaced
    itself, never written through: its target is left as it was."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            os.fchmod(file.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_key(path: Path, key) -> None:
    from cryptography.hazmat.primitives import serialization

    _write_fresh(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()), 0o600)


def _write_certificate(path: Path, certificate) -> None:
    from cryptography.hazmat.primitives import serialization

    _write_fresh(path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)


def make_certificates(directory: Path, hosts: tuple[str, ...] = (), days: int = 365,
                      overwrite: bool = False, ca_key: Path | None = None) -> dict[str, str]:
    """Write a CA and the scheduler, worker and client certificates into ``directory`` (see the module
    docstring).

    Args:
        directory: where the seven PEM files go (created if missing).
        hosts: DNS names or IP addresses the scheduler and workers are reached at (beyond
            ``localhost`` and ``127.0.0.1``); Dask does not check them, other TLS clients may.
        days: validity of every certificate.
        overwrite: replace existing files instead of refusing; each file is replaced by a new one (a
            key gets mode 0600 whatever the old file's mode), and a symlink by a file, its target
            left untouched.
        ca_key: where to keep the CA's private key (outside ``directory``); None: not kept.

    Returns:
        ``{"ca": path, "scheduler_cert": path, "scheduler_key": path, "worker_cert": …, "worker_key": …,
        "client_cert": …, "client_key": …}``, and ``"ca_key"`` when kept.

    Raises:
        FileExistsError: a file would be replaced and ``overwrite`` is false.
        ValueError: ``ca_key`` is inside ``directory``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    if ca_key is not None and directory.resolve() in ca_key.resolve().parents:
        raise ValueError(f"--ca-key {ca_key}: inside {directory}, the directory shipped to every node; keep the "
                         "CA's key elsewhere")
    directory.mkdir(parents=True, exist_ok=True)
    if ca_key is not None:
        ca_key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = [directory / f"{CA}.pem", *(directory / f"{role}{suffix}" for role in ROLES
                                        for suffix in (".pem", "-key.pem")), *([ca_key] if ca_key else [])]
    existing = [str(path) for path in paths if os.path.lexists(path)]  # a dangling symlink too
    if existing and not overwrite:
        raise FileExistsError(f"{', '.join(existing)} exist (use --overwrite to replace them)")
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_private = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("pep cluster CA")).issuer_name(_name("pep cluster CA"))
          .public_key(ca_private.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_private.public_key()), critical=False)
          .sign(ca_private, hashes.SHA256()))
    if ca_key is not None:
        _write_key(ca_key, ca_private)
    _write_certificate(directory / f"{CA}.pem", ca)

    alternative = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alternative.append(x509.DNSName(host))
    for stem in ROLES:
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if stem in SERVERS \
            else [ExtendedKeyUsageOID.CLIENT_AUTH]
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(f"pep {stem}")).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_private.public_key()),
                                  critical=False))
        if stem in SERVERS:
            builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        _write_key(directory / f"{stem}-key.pem", key)
        _write_certificate(directory / f"{stem}.pem", builder.sign(ca_private, hashes.SHA256()))
    return {"ca": str(directory / f"{CA}.pem"),
            **{f"{stem}_{kind}": str(directory / f"{stem}{suffix}") for stem in ROLES
               for kind, suffix in (("cert", ".pem"), ("key", "-key.pem"))},
            **({"ca_key": str(ca_key)} if ca_key is not None else {})}


cluster_app = typer.Typer(name="cluster", help="Tools for running pep on a Dask cluster.",
                          no_args_is_help=True)


@cluster_app.command("certs")
def certs_command(
    directory: Annotated[Path, typer.Argument(help="Directory for the CA and certificates.")],
    host: Annotated[list[str] | None, typer.Option(help="A DNS name or IP address of the scheduler and "
                                                        "workers (repeatable); localhost and "
                                                        "127.0.0.1 are always included.")] = None,
    days: Annotated[int, typer.Option(min=1, help="Validity in days.")] = 365,
    overwrite: Annotated[bool, typer.Option(help="Replace existing files.")] = False,
    ca_key: Annotated[Path | None, typer.Option(help="Keep the CA's private key in this file (outside DIR); "
                                                     "by default it is not kept.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the file paths as one JSON object.")] = False,
) -> None:
    """Make a CA and TLS certificates for the scheduler, the workers and the clients."""
    try:
        paths = make_certificates(directory, tuple(host or ()), days, overwrite, ca_key)
    except (FileExistsError, ValueError, OSError) as error:
        typer.echo(f"pep cluster certs: error: {error}", err=True)
        raise typer.Exit(2 if isinstance(error, (FileExistsError, ValueError)) else 1) from None
    if json_output:
        typer.echo(json.dumps(paths))
        return
    d = directory
    kept = f"the CA's key in {ca_key}" if ca_key else "the CA's key not kept (run again to add names)"
    typer.echo(f"wrote ca.pem, scheduler[-key].pem, worker[-key].pem, client[-key].pem into {d}; {kept}\n"
               f"scheduler: --tls-ca-file {d}/ca.pem --tls-cert {d}/scheduler.pem --tls-key {d}/scheduler-key.pem\n"
               f"workers:   --tls-ca-file {d}/ca.pem --tls-cert {d}/worker.pem --tls-key {d}/worker-key.pem\n"
               f"pep train/evaluate: --tls-ca-file {d}/ca.pem --tls-cert {d}/client.pem --tls-key {d}/client-key.pem")
