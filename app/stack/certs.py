"""A local certificate authority for the secure profile: CA, server and client certificates (PEM)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

#: Names every local server certificate is valid for (clients verify the host name).
_SERVER_NAMES = ("localhost", "kafka", "redis")  # the last two: docker-compose.secure.yml
_SERVER_IPS = ("127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class CertFiles:
    """Where the local CA wrote its files (all PEM; keys are unencrypted PKCS#8, mode 0600)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def server_keystore(self) -> Path:
        """Key followed by certificate in one file (Kafka's PEM keystore)."""
        return self.directory / "server-keystore.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def ensure_certs(directory: Path, *, days: int = 365) -> CertFiles:
    """Create the CA and the server and client certificates once; later calls reuse them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    files = CertFiles(directory)
    if all(p.exists() for p in (files.ca, files.server_keystore, files.client_key)):
        return files
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fraudstream local"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(name("fraudstream local CA"))
        .issuer_name(name("fraudstream local CA")).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                       critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, usage: x509.ObjectIdentifier, server: bool
             ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder().subject_name(name(common)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            alt: list[x509.GeneralName] = [x509.DNSName(n) for n in _SERVER_NAMES]
            alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _SERVER_IPS]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)

    server_cert, server_key = leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH, True)
    client_cert, client_key = leaf("fraudstream client", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    _write_private(directory / "ca.key", pem_key(ca_key))
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert)
    _write_private(files.server_key, server_key)
    _write_private(files.server_keystore, server_key + server_cert)
    files.client_cert.write_bytes(client_cert)
    _write_private(files.client_key, client_key)
    return files
