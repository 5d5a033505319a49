"""Certificates made on the spot for the TLS tests (the `cryptography` package): a CA, a
server certificate it signs for 127.0.0.1 / localhost, and optionally a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    ca: Path  # the CA certificate (what a client trusts)
    cert: Path  # the certificate, signed by the CA
    key: Path  # its private key


def _alternative_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(subject: str, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, server: bool,
           key: ec.EllipticCurvePrivateKey, names: tuple[str, ...] = ("localhost", "127.0.0.1")) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                              else ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_alternative_name(name) for name in names]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256())


def _make_ca(directory: Path, ca_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Name, Path]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = _name(ca_name)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return ca_key, name, ca_path


def make_certificates(directory: Path, ca_name: str = "raftmq test CA") -> tuple[CertFiles, CertFiles]:
    """(server, client) certificate files under `directory`, both signed by one new CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, name, ca_path = _make_ca(directory, ca_name)
    files = []
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(f"raftmq test {role}", ca_key, name, role == "server", key)
        cert_path, key_path = directory / f"{role}.pem", directory / f"{role}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        files.append(CertFiles(ca_path, cert_path, key_path))
    return files[0], files[1]


def make_group_certificates(directory: Path, groups: dict[str, tuple[str, ...]]) -> tuple[Path, dict[str, CertFiles]]:
    """One CA, and per group a server certificate for all of `groups[group]` (host names or
    addresses: every member of a group presents the same one): (CA file, {group: files})."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, name, ca_path = _make_ca(directory, "raftmq rehearsal CA")
    files = {}
    for group, names in groups.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(f"raftmq group {group}", ca_key, name, True, key, names)
        cert_path, key_path = directory / f"{group}.pem", directory / f"{group}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        files[group] = CertFiles(ca_path, cert_path, key_path)
    return ca_path, files
