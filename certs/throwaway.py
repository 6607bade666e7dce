"""Throw-away PKI for tests: a CA, a loopback serving certificate and an admin client certificate.

The control-plane harness and the webhook tests use it: the serving certificate names
`IP:127.0.0.1` and `DNS:localhost`, the client certificate is in the `system:masters` group.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .bundle import write_atomic
from .pki import Issued, make_ca, make_client_cert, make_server_cert

LOOPBACK_DNS = ["localhost"]
LOOPBACK_IPS = ["127.0.0.1"]


@dataclass(frozen=True)
class ThrowawayPKI:
    directory: Path
    ca: Issued
    server: Issued
    admin: Issued

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    def rotate_server(self) -> Issued:
        """A new loopback serving certificate from the same CA, written over the old files."""
        server = make_server_cert(self.ca, LOOPBACK_DNS, LOOPBACK_IPS, days=1)
        write_atomic(self.server_key, server.key_pem(), private=True)
        write_atomic(self.server_cert, server.cert_pem())
        return server


def throwaway_pki(directory: Path, admin_name: str = "admin") -> ThrowawayPKI:
    ca = make_ca("mlgate-test-ca", days=2)
    pki = ThrowawayPKI(
        directory, ca, make_server_cert(ca, LOOPBACK_DNS, LOOPBACK_IPS, days=1),
        make_client_cert(ca, admin_name, ["system:masters"], days=1),
    )
    write_atomic(pki.ca_cert, ca.cert_pem())
    write_atomic(pki.server_key, pki.server.key_pem(), private=True)
    write_atomic(pki.server_cert, pki.server.cert_pem())
    write_atomic(pki.admin_key, pki.admin.key_pem(), private=True)
    write_atomic(pki.admin_cert, pki.admin.cert_pem())
    return pki
