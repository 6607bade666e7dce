"""The TLS suites the running webhook accepts: TLS 1.2 only with ECDHE and an AEAD cipher (Mozilla's
"intermediate" profile, without DHE), TLS 1.3 with its own suites, which are all AEAD.

Every check is a real handshake on loopback against the real server, made by a client that offers
one suite only; `openssl s_client` repeats two of them when it is installed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from webhook_harness import TLSFiles

from mlgate_webhook.server import Webhook
from mlgate_webhook.tls import server_context

# Mozilla intermediate, TLS 1.2, ECDHE only; the server's certificate decides ECDSA or RSA
INTERMEDIATE_TLS12 = {
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
}
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
CBC_SUITES = ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA256",
              "ECDHE-RSA-AES256-SHA384", "AES128-SHA256", "AES256-SHA256", "ECDHE-ECDSA-AES128-SHA"]


def _client(cipher: str | None = None, tls13: bool = False) -> ssl.SSLContext:
    """A client that offers `cipher` alone (TLS 1.2), or TLS 1.3 alone; it trusts anything (the suite is the point)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if tls13:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    else:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(f"{cipher}:@SECLEVEL=0")  # so that only the server can refuse it
    return context


def _handshake(webhook: Webhook, context: ssl.SSLContext) -> tuple[str, str]:
    """(suite, version) the server agreed to; raises ssl.SSLError when it refused."""
    with socket.create_connection(("127.0.0.1", webhook.port), timeout=5) as sock, \
            context.wrap_socket(sock, server_hostname="localhost") as tls:
        cipher = tls.cipher()
        version = tls.version()
        assert cipher is not None and version is not None
        return cipher[0], version


def _client_knows(cipher: str) -> bool:
    try:
        _client(cipher)
    except ssl.SSLError:  # this OpenSSL build has no such suite
        return False
    return True


def _expected_tls12(tls_files: TLSFiles) -> set[str]:
    key = x509.load_pem_x509_certificate(tls_files.cert.read_bytes()).public_key()
    auth = "-ECDSA-" if isinstance(key, ec.EllipticCurvePublicKey) else "-RSA-"
    return {suite for suite in INTERMEDIATE_TLS12 if auth in suite}


@pytest.mark.parametrize("cipher", CBC_SUITES)
def test_a_client_that_offers_only_a_cbc_suite_fails_the_handshake(webhook: Webhook, cipher: str):
    if not _client_knows(cipher):
        pytest.skip(f"this OpenSSL has no {cipher}")
    with pytest.raises(ssl.SSLError):
        _handshake(webhook, _client(cipher))


def test_a_client_that_offers_an_aead_suite_gets_it(webhook: Webhook, tls_files: TLSFiles):
    for cipher in sorted(_expected_tls12(tls_files)):
        assert _handshake(webhook, _client(cipher)) == (cipher, "TLSv1.2")
    suite, version = _handshake(webhook, _client(tls13=True))
    assert version == "TLSv1.3" and suite in TLS13_SUITES


def test_of_every_tls12_suite_openssl_knows_the_server_accepts_only_the_intermediate_aead_ones(
        webhook: Webhook, tls_files: TLSFiles):
    everything = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    everything.set_ciphers("ALL:@SECLEVEL=0")
    tls12 = sorted({c["name"] for c in everything.get_ciphers() if c["protocol"] == "TLSv1.2"})
    assert len(tls12) > 20  # CBC, RSA key exchange, DHE, CCM, ARIA, ...: a real sample of what a client may offer
    accepted = set()
    for cipher in tls12:
        with contextlib.suppress(ssl.SSLError, ConnectionError):  # refused
            accepted.add(_handshake(webhook, _client(cipher))[0])
    assert accepted == _expected_tls12(tls_files)


def test_the_contexts_list_no_tls12_suite_but_ecdhe_with_aead(webhook: Webhook, tls_files: TLSFiles):
    # the listener, and the context a certificate rotation builds (server_context), offer the same
    for context in (webhook.tls.listener, server_context(tls_files.cert, tls_files.key)):
        suites = context.get_ciphers()
        tls12 = {c["name"] for c in suites if c["protocol"] == "TLSv1.2"}
        assert tls12 == INTERMEDIATE_TLS12
        assert all(c["aead"] for c in suites)
        assert context.minimum_version is ssl.TLSVersion.TLSv1_2


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")
def test_openssl_s_client_agrees(webhook: Webhook, tls_files: TLSFiles):
    def s_client(cipher: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{webhook.port}", "-servername", "localhost",
             "-tls1_2", "-cipher", f"{cipher}:@SECLEVEL=0"],
            input="", capture_output=True, text=True, timeout=10, check=False)

    aead = min(_expected_tls12(tls_files))
    good = s_client(aead)
    assert good.returncode == 0 and f"Cipher is {aead}" in good.stdout, good.stdout + good.stderr
    cbc = aead.replace("-GCM", "")  # its CBC twin: ECDHE-...-AES128-SHA256
    bad = s_client(cbc)
    assert bad.returncode != 0 and f"Cipher is {cbc}" not in bad.stdout, bad.stdout + bad.stderr
