"""Throwaway certificates for TLS on loopback: a CA, server and client certificates, as PEM files.

Tests and the local cluster start real TLS servers (Redis, the gateway,
PostgreSQL, ZooKeeper) with certificates made here, so every handshake is
real and nothing depends on the machine's trust store. A certificate can be
made already expired, or for the wrong host, to test that a client refuses
it. Keys are EC P-256 (fast to make); key files are written with mode 0600,
which PostgreSQL insists on.

`cryptography` is imported on first use: the rest of the cluster helper runs
without it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fencegate.lab.cluster.errors import ClusterError

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["LOOPBACK_HOSTS", "Authority", "KeyPair"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
VALID_FOR = dt.timedelta(days=2)  # long enough for any run, short enough to be obviously throwaway


def _crypto() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:
        raise ClusterError(
            "making test certificates needs the `cryptography` package: pip install 'fencegate[dev]'"
        ) from exc


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return path


def _name(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,  # what PostgreSQL, Redis and the JVM all read
        serialization.NoEncryption(),
    )


def _sans(hosts: Sequence[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


class Authority:
    """A certificate authority of its own, in `directory`; `issue()` signs server and client certificates."""

    def __init__(self, directory: Path, *, name: str = "fencegate throwaway CA") -> None:
        _crypto()
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert = _write(directory / "ca.pem", self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        *,
        hosts: Sequence[str] = LOOPBACK_HOSTS,
        server: bool = True,
        client: bool = False,
        expired: bool = False,
    ) -> KeyPair:
        """A certificate for `name` signed by this CA, valid for `hosts` (IPs or DNS names).

        `server`/`client` set its extended key usage; `expired` makes one whose
        validity ended yesterday (to test that a client refuses it).
        """
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        start, end = (now - 2 * VALID_FOR, now - dt.timedelta(days=1)) if expired else (now, now + VALID_FOR)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start - dt.timedelta(minutes=5))
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = self.directory / name.replace("/", "_")
        return KeyPair(
            cert=_write(stem.with_suffix(".crt"), cert.public_bytes(serialization.Encoding.PEM)),
            key=_write(stem.with_suffix(".key"), _key_pem(key), private=True),
        )
