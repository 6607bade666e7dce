"""The real webhook server on a free loopback port, TLS from `mlgate certs`, httpx as the client."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import httpx
from click.testing import CliRunner

from mlgate_certs.bundle import CertFiles
from mlgate_webhook.commands import certs
from mlgate_webhook.server import ServeOptions, Webhook
from mlgate_webhook.service import Settings

HERE = Path(__file__).parent
TEST_POLICIES = HERE / "policies"
FAST = Settings(read_timeout=0.5, header_timeout=0.5, poll_interval=0.05)


@dataclass(frozen=True)
class TLSFiles(CertFiles):
    """What `mlgate certs --out-dir` writes, and a client that trusts its CA."""

    @property
    def ca(self) -> Path:
        return self.ca_cert

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def make_certs(directory: Path) -> TLSFiles:
    """`mlgate certs` for the Service, plus the loopback names the tests connect to."""
    result = CliRunner().invoke(certs, ["--out-dir", str(directory), "--san", "127.0.0.1", "--san", "localhost"])
    assert result.exit_code == 0, result.output
    return TLSFiles(directory)


def start_webhook(tls: TLSFiles, policy_paths: list[Path], settings: Settings = FAST) -> Webhook:
    options = ServeOptions(port=0, cert_file=tls.cert, key_file=tls.key,
                           policy_paths=tuple(str(p) for p in policy_paths), settings=settings)
    webhook = Webhook(options)
    webhook.start()
    return webhook


def client(webhook: Webhook, tls: TLSFiles) -> httpx.Client:
    return httpx.Client(base_url=webhook.url, verify=tls.client_context(), timeout=10.0)


def raw_tls_socket(webhook: Webhook, tls: TLSFiles) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", webhook.port), timeout=5)
    return tls.client_context().wrap_socket(sock, server_hostname="localhost")
