"""Keys and X.509 certificates: a CA, serving certificates and client certificates.

ECDSA P-256 is the default key (small, fast handshakes; accepted by every Kubernetes
client); RSA 2048 is there for environments that ask for it. Serving certificates carry
their names as subjectAltName entries, since Go's TLS stack (the kube-apiserver) ignores the
common name. Certificates start five minutes in the past to absorb clock skew.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ecdsa", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
KEY_TYPES: tuple[KeyType, ...] = ("ecdsa", "rsa")
CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def not_after(self) -> dt.datetime:
        return self.cert.not_valid_after_utc


def new_key(key_type: KeyType = "ecdsa") -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service answers to inside the cluster."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def split_sans(values: Iterable[str]) -> tuple[list[str], list[str]]:
    """Extra subjectAltNames, as (DNS names, IP addresses); `IP:` and `DNS:` prefixes are accepted.

    ValueError for an `IP:` value that is not an address."""
    dns: list[str] = []
    ips: list[str] = []
    for value in values:
        kind, _, rest = value.partition(":")
        if kind == "IP" and rest:
            try:
                ips.append(str(ipaddress.ip_address(rest)))
            except ValueError:
                raise ValueError(f"{value}: {rest!r} is not an IP address") from None
            continue
        if kind == "DNS" and rest:
            dns.append(rest)
            continue
        try:
            ips.append(str(ipaddress.ip_address(value)))
        except ValueError:
            dns.append(value)
    return dns, ips


def make_ca(common_name: str = "mlgate-ca", *, days: int = 3650, key_type: KeyType = "ecdsa") -> Issued:
    key = new_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usage = x509.KeyUsage(
        digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False,
    )
    builder = (
        _builder(name, name, key, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return Issued(builder.sign(key, hashes.SHA256()), key)


def make_server_cert(
    ca: Issued, dns_names: Sequence[str], ips: Sequence[str] = (), *, common_name: str | None = None,
    days: int = 365, key_type: KeyType = "ecdsa",
) -> Issued:
    if not dns_names and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    subject = common_name or (dns_names[0] if dns_names else ips[0])
    return _leaf(ca, subject, (), ExtendedKeyUsageOID.SERVER_AUTH, days=days, key_type=key_type, sans=sans)


def make_client_cert(
    ca: Issued, common_name: str, organizations: Sequence[str] = (), *, days: int = 365,
    key_type: KeyType = "ecdsa",
) -> Issued:
    """A client certificate; Kubernetes reads the user from CN and the groups from O."""
    return _leaf(ca, common_name, organizations, ExtendedKeyUsageOID.CLIENT_AUTH, days=days, key_type=key_type, sans=[])


def load_issued(cert_path: str | Path, key_path: str | Path) -> Issued:
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError(f"{key_path}: only ECDSA and RSA keys are supported")
    return Issued(cert, key)


def _leaf(
    ca: Issued, common_name: str, organizations: Sequence[str], purpose: x509.ObjectIdentifier, *, days: int,
    key_type: KeyType, sans: list[x509.GeneralName],
) -> Issued:
    key = new_key(key_type)
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = x509.KeyUsage(
        digital_signature=True, key_encipherment=key_type == "rsa", content_commitment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False,
        decipher_only=False,
    )
    builder = (
        _builder(x509.Name(attributes), ca.cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, days: int) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
    )
