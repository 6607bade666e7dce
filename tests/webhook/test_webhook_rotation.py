"""Certificate rotation under continuous requests: new handshakes get the new certificate, nothing fails."""

from __future__ import annotations

import socket
import ssl
import warnings

import pytest
from builders import pytorchjob
from cryptography import x509
from webhook_harness import TEST_POLICIES, client, make_certs, raw_tls_socket, start_webhook
from webhook_load import Load, wait_until
from webhook_reviews import encode, review

from mlgate_certs.bundle import CertFiles, write_atomic
from mlgate_certs.pki import load_issued, make_server_cert

BODY = encode(review(pytorchjob()))
HEADERS = {"content-type": "application/json"}


def served_serial(webhook, tls) -> int:
    with raw_tls_socket(webhook, tls) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def validate(c):
    return c.post("/validate", content=BODY, headers=HEADERS)


def test_rotating_the_certificate_under_load_fails_no_request(tmp_path):
    tls = make_certs(tmp_path / "tls")
    webhook = start_webhook(tls, [TEST_POLICIES])
    ca = load_issued(tls.ca, tmp_path / "tls" / "ca.key")
    files = CertFiles(tmp_path / "tls")
    fresh = Load(lambda: client(webhook, tls), validate, fresh_connections=True).start()
    kept = Load(lambda: client(webhook, tls), validate, threads=1).start()
    try:
        for _ in range(3):
            new = make_server_cert(ca, ["localhost"], ["127.0.0.1"], days=2)
            refused = webhook.metrics.cert_reload_errors._value.get() + 1
            # The key first, alone: the reloader must refuse the mismatched pair and keep serving the old one.
            write_atomic(files.key, new.key_pem(), private=True)
            wait_until(lambda n=refused: webhook.metrics.cert_reload_errors._value.get() >= n, what="a refused pair")
            assert webhook.tls.last_error
            write_atomic(files.cert, new.cert_pem())
            serial = new.cert.serial_number
            wait_until(lambda s=serial: served_serial(webhook, tls) == s, what="the new certificate")
            assert webhook.tls.last_error == ""
            assert webhook.tls.expires == new.not_after.replace(microsecond=0)
    finally:
        fresh.stop()
        kept.stop()
        webhook.stop()
    assert fresh.failures == [] and kept.failures == []
    assert len(fresh.outcomes) >= 10 and len(kept.outcomes) >= 10


def test_the_server_refuses_tls_below_1_2(tmp_path):
    tls = make_certs(tmp_path / "tls")
    webhook = start_webhook(tls, [TEST_POLICIES])
    try:
        assert webhook.tls.listener.minimum_version is ssl.TLSVersion.TLSv1_2
        old = tls.client_context()
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # so that only the server's version floor can refuse
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError), old.wrap_socket(
            socket.create_connection(("127.0.0.1", webhook.port), timeout=5), server_hostname="localhost"
        ):
            pass
        with raw_tls_socket(webhook, tls) as sock:
            assert sock.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        webhook.stop()
