"""`mlgate certs` and the PKI helpers; `mlgate serve` argument errors; the commands module stays light."""

from __future__ import annotations

import base64
import ipaddress
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mlgate_certs.bundle import CertFiles, ensure_dev_certs, patch_ca_bundle
from mlgate_certs.pki import load_issued, split_sans
from mlgate_certs.throwaway import throwaway_pki
from mlgate_webhook.commands import certs, serve

ROOT = Path(__file__).resolve().parents[2]


def run_certs(*args: str):
    return CliRunner().invoke(certs, list(args))


def sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


def test_certs_names_the_service_and_extra_sans_and_prints_the_ca_bundle(tmp_path):
    result = run_certs("--out-dir", str(tmp_path), "--service", "gate", "--namespace", "ops",
                       "--san", "gate.example.com", "--san", "10.0.0.7", "--san", "IP:::1")
    assert result.exit_code == 0, result.output
    files = CertFiles(tmp_path)
    server = load_issued(files.cert, files.key)
    dns, ips = sans(server.cert)
    assert dns == ["gate", "gate.ops", "gate.ops.svc", "gate.ops.svc.cluster.local", "gate.example.com"]
    assert ips == ["10.0.0.7", "::1"]
    assert isinstance(server.key, ec.EllipticCurvePrivateKey) and server.key.curve.name == "secp256r1"
    usage = server.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ca_pem = files.ca_cert.read_bytes()
    assert base64.b64encode(ca_pem).decode() in result.stdout.splitlines()
    ca = x509.load_pem_x509_certificate(ca_pem)
    server.cert.verify_directly_issued_by(ca)
    assert files.key.stat().st_mode & 0o777 == 0o600
    assert files.ca_key.stat().st_mode & 0o777 == 0o600


def test_certs_keeps_the_ca_so_the_ca_bundle_survives_a_rotation(tmp_path):
    first = run_certs("--out-dir", str(tmp_path))
    second = run_certs("--out-dir", str(tmp_path))
    assert first.stdout == second.stdout
    third = run_certs("--out-dir", str(tmp_path), "--new-ca")
    assert third.stdout != first.stdout


def test_certs_makes_rsa_keys_on_request(tmp_path):
    assert run_certs("--out-dir", str(tmp_path), "--key-type", "rsa").exit_code == 0
    assert isinstance(load_issued(tmp_path / "tls.crt", tmp_path / "tls.key").key, rsa.RSAPrivateKey)


def test_certs_patches_the_ca_bundle_into_a_copy_of_the_webhook_manifests_keeping_comments(tmp_path):
    manifest = tmp_path / "webhooks.yaml"
    shutil.copy(ROOT / "manifests" / "webhooks.yaml", manifest)
    result = run_certs("--out-dir", str(tmp_path / "pki"), "--patch", str(manifest))
    assert result.exit_code == 0, result.output
    assert manifest.read_text() == (ROOT / "manifests" / "webhooks.yaml").read_text()  # the source is untouched
    bundle = base64.b64encode((tmp_path / "pki" / "ca.crt").read_bytes()).decode()
    text = (tmp_path / "pki" / "webhooks.yaml").read_text()
    hooks = sum(len(d["webhooks"]) for d in yaml.safe_load_all((ROOT / "manifests" / "webhooks.yaml").read_text()))
    assert hooks >= 6 and text.count(f"caBundle: {bundle}") == hooks
    assert "# Fail: these are the kinds mlgate exists to guard" in text
    assert result.stdout == ""


def test_certs_refuses_a_file_without_a_ca_bundle_line(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("kind: ConfigMap\n")
    result = run_certs("--out-dir", str(tmp_path / "pki"), "--patch", str(other))
    assert result.exit_code == 2
    assert "no caBundle line" in result.output


def test_patching_twice_gives_the_same_text():
    once, count = patch_ca_bundle("a:\n  caBundle: old\n  caBundle: \"\"\n", "NEW")
    assert (once, count) == ("a:\n  caBundle: NEW\n  caBundle: NEW\n", 2)
    assert patch_ca_bundle(once, "NEW") == (once, 2)


def test_sans_are_split_into_dns_names_and_ip_addresses():
    assert split_sans(["a.example", "127.0.0.1", "DNS:b", "IP:::1", "fe80::1"]) == (
        ["a.example", "b"], ["127.0.0.1", "::1", "fe80::1"])


def test_an_ip_san_that_is_not_an_address_is_a_usage_error(tmp_path):
    result = run_certs("--out-dir", str(tmp_path), "--san", "IP:notanip")
    assert result.exit_code == 2 and "'notanip' is not an IP address" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "tls.crt").exists()


def test_the_serving_certificate_never_outlives_its_ca(tmp_path):
    assert run_certs("--out-dir", str(tmp_path), "--ca-days", "40").exit_code == 0
    result = run_certs("--out-dir", str(tmp_path), "--days", "365")
    ca, server = (load_issued(tmp_path / f"{n}.crt", tmp_path / f"{n}.key") for n in ("ca", "tls"))
    assert server.not_after <= ca.not_after
    assert "expires on" in result.output and "--new-ca" in result.output


def test_the_throwaway_pki_has_a_loopback_server_and_a_system_masters_client(tmp_path):
    pki = throwaway_pki(tmp_path)
    dns, ips = sans(pki.server.cert)
    assert dns == ["localhost"] and ips == ["127.0.0.1"]
    subject = pki.admin.cert.subject
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = pki.admin.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for path in (pki.ca_cert, pki.server_cert, pki.server_key, pki.admin_cert, pki.admin_key):
        assert path.exists()
    pki.admin.cert.verify_directly_issued_by(pki.ca.cert)


def test_dev_certs_are_made_once_and_reused(tmp_path):
    files = ensure_dev_certs(tmp_path)
    serial = load_issued(files.cert, files.key).cert.serial_number
    assert load_issued(ensure_dev_certs(tmp_path).cert, files.key).cert.serial_number == serial
    dns, ips = sans(load_issued(files.cert, files.key).cert)
    assert dns == ["localhost"] and ipaddress.ip_address("127.0.0.1") in map(ipaddress.ip_address, ips)


def test_serve_wants_both_or_neither_of_cert_and_key(tmp_path):
    pki = throwaway_pki(tmp_path)
    result = CliRunner().invoke(serve, ["--cert-file", str(pki.server_cert)])
    assert result.exit_code == 2
    assert "give both --cert-file and --key-file" in result.output


def test_importing_the_commands_loads_neither_the_server_nor_cryptography():
    probe = ("import sys, mlgate_webhook.commands; "
             "print(sorted(m for m in ('fastapi', 'uvicorn', 'cryptography', 'kubernetes', 'mlgate.engine', "
             "'prometheus_client') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
