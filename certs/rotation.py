"""Self-managed webhook certificates: what their Secret holds, and the one next step when something is due.

Pure: no I/O, no clock of its own. The webhook's leader calls `next_state` with the Secret's content and the time,
writes what it returns, then writes `state.bundle` into the webhook configurations.

A CA rollover takes two steps, so that the API server never sees a certificate it does not trust:

1. the new CA is made and added to the caBundle beside the old one; the serving certificate stays the old CA's;
2. `propagation` later (the API server picks up configuration changes within a second or two), the new CA
   becomes the signing CA and a new serving certificate is issued from it. The old CA stays in the caBundle until
   it expires, so a replica that has not yet reloaded its certificate is still trusted.

Certificates are renewed at 2/3 of their lifetime (as kubelet's client rotation does), so a missed renewal
leaves a third of the lifetime to notice it.

Secret keys: tls.crt, tls.key (the serving pair, as a kubernetes.io/tls Secret names them), ca.crt, ca.key (the
signing CA), next-ca.crt, next-ca.key (a CA in step 1), ca-bundle.crt (every CA the configurations trust).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .pki import Issued, make_ca, make_server_cert

__all__ = ["CertState", "Lifetimes", "due", "dump", "load", "next_state"]

NEXT_CA_SINCE = "mlgate.dev/next-ca-since"  # annotation: when the next CA entered the caBundle
ROTATE_CA = "mlgate.dev/rotate-ca"  # annotation a person sets (any new value) to force a CA rollover
ROTATED_FOR = "mlgate.dev/rotated-ca-for"  # annotation: the ROTATE_CA value last acted on


@dataclass(frozen=True)
class Lifetimes:
    ca_days: int = 1825  # 5 years: renewed after 3 years and 4 months
    serving_days: int = 90  # renewed after 60 days
    propagation: dt.timedelta = dt.timedelta(seconds=15)  # between a caBundle change and using the new CA


@dataclass(frozen=True)
class CertState:
    ca: Issued | None = None
    serving: Issued | None = None
    next_ca: Issued | None = None
    bundle: tuple[x509.Certificate, ...] = ()
    next_since: dt.datetime | None = None
    rotated_for: str = ""  # the forced-rotation request already acted on

    def bundle_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.bundle)


def due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Past 2/3 of its lifetime."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= start + (end - start) * 2 / 3


def next_state(state: CertState, dns_names: Sequence[str], ips: Sequence[str], now: dt.datetime, *,
               lifetimes: Lifetimes = Lifetimes(), rotate_request: str = "") -> tuple[CertState, str] | None:
    """The state after the one step that is due, and why; None when nothing is."""
    if state.ca is None or state.ca.not_after <= now:
        ca = make_ca(_ca_name(now), days=lifetimes.ca_days)
        serving = make_server_cert(ca, dns_names, ips, days=lifetimes.serving_days)
        return CertState(ca, serving, None, (ca.cert,), None, rotate_request), "new CA and serving certificate"
    forced = bool(rotate_request) and rotate_request != state.rotated_for
    if state.next_ca is None and (forced or due(state.ca.cert, now)):
        new = make_ca(_ca_name(now), days=lifetimes.ca_days)
        bundle = (*_valid(state.bundle, now), new.cert)
        why = "CA rollover requested" if forced else "CA past 2/3 of its lifetime"
        return replace(state, next_ca=new, bundle=bundle, next_since=now, rotated_for=rotate_request), \
            f"{why}: new CA added to the caBundle"
    if state.next_ca is not None and state.next_since is not None and now - state.next_since >= lifetimes.propagation:
        ca = state.next_ca
        serving = make_server_cert(ca, dns_names, ips, days=_days(ca, lifetimes, now))
        bundle = tuple(c for c in _valid(state.bundle, now))
        return replace(state, ca=ca, serving=serving, next_ca=None, next_since=None, bundle=bundle), \
            "serving certificate issued by the new CA"
    why = _serving_problem(state, dns_names, ips, now)
    if why:
        serving = make_server_cert(state.ca, dns_names, ips, days=_days(state.ca, lifetimes, now))
        return replace(state, serving=serving, bundle=_with(state.bundle, state.ca.cert, now)), why
    pruned = _with(state.bundle, state.ca.cert, now)
    if state.next_ca is not None:
        pruned = _with(pruned, state.next_ca.cert, now)
    if pruned != state.bundle:
        return replace(state, bundle=pruned), "expired CA left out of the caBundle"
    return None


def _serving_problem(state: CertState, dns_names: Sequence[str], ips: Sequence[str], now: dt.datetime) -> str:
    serving, ca = state.serving, state.ca
    assert ca is not None
    if serving is None:
        return "no serving certificate"
    if serving.cert.issuer != ca.cert.subject or _key_id(serving.cert) != _subject_key_id(ca.cert):
        return "serving certificate not issued by the signing CA"
    if due(serving.cert, now):
        return "serving certificate past 2/3 of its lifetime"
    if _names(serving.cert) != (sorted(dns_names), sorted(ips)):
        return "serving certificate names changed"
    return ""


def _ca_name(now: dt.datetime) -> str:
    """Each CA its own subject, so the caBundle's CAs and the log tell them apart."""
    return f"mlgate-webhook-ca-{now:%Y%m%d%H%M%S}"


def _days(ca: Issued, lifetimes: Lifetimes, now: dt.datetime) -> int:
    """The serving lifetime, cut so the certificate never outlives its CA."""
    return max(1, min(lifetimes.serving_days, (ca.not_after - now).days))


def _valid(bundle: Sequence[x509.Certificate], now: dt.datetime) -> tuple[x509.Certificate, ...]:
    return tuple(c for c in bundle if c.not_valid_after_utc > now)


def _with(bundle: Sequence[x509.Certificate], cert: x509.Certificate, now: dt.datetime) -> tuple[x509.Certificate, ...]:
    kept = _valid(bundle, now)
    return kept if cert in kept else (*kept, cert)


def _key_id(cert: x509.Certificate) -> bytes | None:
    try:
        return cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        return None


def _subject_key_id(cert: x509.Certificate) -> bytes | None:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        return None


def _names(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return sorted(sans.get_values_for_type(x509.DNSName)), sorted(str(i) for i in sans.get_values_for_type(
        x509.IPAddress))


# --- the Secret -------------------------------------------------------------------------------------------------

def load(data: Mapping[str, bytes], annotations: Mapping[str, str]) -> CertState:
    """The state a Secret holds; a missing or unreadable part is None (and is made again)."""
    since = annotations.get(NEXT_CA_SINCE)
    return CertState(
        ca=_pair(data, "ca.crt", "ca.key"), serving=_pair(data, "tls.crt", "tls.key"),
        next_ca=_pair(data, "next-ca.crt", "next-ca.key"),
        bundle=tuple(_certs(data.get("ca-bundle.crt", b""))),
        next_since=dt.datetime.fromisoformat(since) if since else None,
        rotated_for=annotations.get(ROTATED_FOR, ""))


def dump(state: CertState) -> tuple[dict[str, bytes], dict[str, str]]:
    """(data, annotations) for the Secret."""
    data: dict[str, bytes] = {"ca-bundle.crt": state.bundle_pem()}
    for prefix, pair in (("ca", state.ca), ("next-ca", state.next_ca)):
        if pair is not None:
            data[f"{prefix}.crt"], data[f"{prefix}.key"] = pair.cert_pem(), pair.key_pem()
    if state.serving is not None:
        data["tls.crt"], data["tls.key"] = state.serving.cert_pem(), state.serving.key_pem()
    annotations = {ROTATED_FOR: state.rotated_for}
    annotations[NEXT_CA_SINCE] = state.next_since.isoformat() if state.next_since else ""
    return data, annotations


def _pair(data: Mapping[str, bytes], cert_key: str, key_key: str) -> Issued | None:
    if cert_key not in data or key_key not in data:
        return None
    try:
        cert = x509.load_pem_x509_certificate(data[cert_key])
        key = serialization.load_pem_private_key(data[key_key], password=None)
    except ValueError:
        return None
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    return Issued(cert, key) if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) else None


def _certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem) if pem.strip() else []
    except ValueError:
        return []
