"""Throwaway certificates and keys for a loopback control plane."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files written by `write_pki`."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    client_ca_cert: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _ca(cn: str) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: rsa.RSAPrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def write_pki(folder: Path) -> Pki:
    """Write a serving CA + cert (SANs 127.0.0.1, ::1, localhost), a client CA with an
    admin client cert (O=system:masters) and a service-account RSA key pair."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("goalkeeper-devcluster-ca")
    serving_key, serving_cert = _leaf(
        ca_key,
        ca_cert,
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ],
    )
    client_ca_key, client_ca_cert = _ca("goalkeeper-devcluster-client-ca")
    admin_key, admin_cert = _leaf(
        client_ca_key,
        client_ca_cert,
        _name("goalkeeper-admin", "system:masters"),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = _key()
    sa_pub = folder / "sa.pub"
    sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca_cert=_write_cert(folder / "ca.crt", ca_cert),
        serving_cert=_write_cert(folder / "apiserver.crt", serving_cert),
        serving_key=_write_key(folder / "apiserver.key", serving_key),
        client_ca_cert=_write_cert(folder / "client-ca.crt", client_ca_cert),
        admin_cert=_write_cert(folder / "admin.crt", admin_cert),
        admin_key=_write_key(folder / "admin.key", admin_key),
        sa_key=_write_key(folder / "sa.key", sa_key),
        sa_pub=sa_pub,
    )
