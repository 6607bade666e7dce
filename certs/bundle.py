"""Certificate files on disk, the `caBundle` for webhook configurations, and dev certificates.

Files are written to a temporary name and renamed into place, so a server that reloads them
never reads half a file; private keys are created with mode 0600.

    ca.crt ca.key      the CA (kept and reused, so the caBundle stays the same across rotations)
    tls.crt tls.key    the serving certificate, named as a kubernetes.io/tls Secret names them
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .pki import Issued, KeyType, load_issued, make_ca, make_server_cert

RENEW_BEFORE = dt.timedelta(days=30)
_CA_BUNDLE_LINE = re.compile(r"^(?P<indent>[ \t]*)caBundle:[^\n]*$", re.MULTILINE)


@dataclass(frozen=True)
class CertFiles:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"


def write_atomic(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def write_ca(files: CertFiles, ca: Issued) -> None:
    write_atomic(files.ca_key, ca.key_pem(), private=True)
    write_atomic(files.ca_cert, ca.cert_pem())


def write_serving(files: CertFiles, server: Issued) -> None:
    """The key first: a reloader that sees the new key with the old certificate refuses the pair and waits."""
    write_atomic(files.key, server.key_pem(), private=True)
    write_atomic(files.cert, server.cert_pem())


def ca_bundle(ca_pem: bytes) -> str:
    """The value of `clientConfig.caBundle`: the CA certificate PEM, base64-encoded."""
    return base64.b64encode(ca_pem).decode("ascii")


def patch_ca_bundle(text: str, bundle: str) -> tuple[str, int]:
    """Set every `caBundle:` line of a YAML text; comments and layout stay as written."""
    return _CA_BUNDLE_LINE.subn(lambda m: f"{m.group('indent')}caBundle: {bundle}", text)


def load_or_make_ca(files: CertFiles, *, new: bool = False, days: int = 3650, key_type: KeyType = "ecdsa") -> Issued:
    if not new and files.ca_cert.exists() and files.ca_key.exists():
        ca = load_issued(files.ca_cert, files.ca_key)
        if ca.not_after - dt.datetime.now(dt.UTC) > RENEW_BEFORE:
            return ca
    ca = make_ca(days=days, key_type=key_type)
    write_ca(files, ca)
    return ca


def issue_serving(
    files: CertFiles, dns_names: list[str], ips: list[str], *, new_ca: bool = False, days: int = 365,
    ca_days: int = 3650, key_type: KeyType = "ecdsa",
) -> tuple[Issued, Issued]:
    """(CA, serving certificate), written to `files`; an existing, valid CA is reused unless `new_ca`.

    The serving certificate never outlives its CA: its validity is cut to the CA's last day.
    """
    ca = load_or_make_ca(files, new=new_ca, days=ca_days, key_type=key_type)
    days = min(days, (ca.not_after - dt.datetime.now(dt.UTC)).days)  # at least RENEW_BEFORE: a CA that close is renewed
    server = make_server_cert(ca, dns_names, ips, days=days, key_type=key_type)
    write_serving(files, server)
    return ca, server


def ensure_dev_certs(directory: Path) -> CertFiles:
    """A CA and a localhost serving certificate under `directory`, made once and renewed when close to expiry."""
    files = CertFiles(directory)
    if files.cert.exists() and files.key.exists() and files.ca_cert.exists():
        try:
            current = load_issued(files.cert, files.key)
        except (OSError, ValueError):
            current = None
        if current is not None and current.not_after - dt.datetime.now(dt.UTC) > RENEW_BEFORE:
            return files
    issue_serving(files, ["localhost"], ["127.0.0.1", "::1"])
    return files
