"""Certificates for the mlgate webhook, imported as `mlgate_certs`.

`pki` makes keys and certificates, `bundle` writes them and the webhook `caBundle`,
`throwaway` makes a loopback PKI for tests and local control planes.
"""

from .bundle import CertFiles, ca_bundle, ensure_dev_certs, issue_serving, patch_ca_bundle
from .pki import Issued, KeyType, load_issued, make_ca, make_client_cert, make_server_cert
from .throwaway import ThrowawayPKI, throwaway_pki

__all__ = [
    "CertFiles",
    "Issued",
    "KeyType",
    "ThrowawayPKI",
    "ca_bundle",
    "ensure_dev_certs",
    "issue_serving",
    "load_issued",
    "make_ca",
    "make_client_cert",
    "make_server_cert",
    "patch_ca_bundle",
    "throwaway_pki",
]
