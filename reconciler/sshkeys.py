"""The SSH key pair of an MPI job's Secret, made once when the Secret is created (mpi.py says why).

mpi-operator generates an ECDSA P-521 key: the private key as a SEC1 PEM ("EC PRIVATE KEY"), the public key in
authorized_keys form (`pkg/controller/mpi_job_controller.go` newSSHAuthSecret). The same here, with `cryptography`.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .mpi import PRIVATE_KEY, PUBLIC_KEY, SSH_SECRET_TYPE


def key_pair() -> tuple[bytes, bytes]:
    """(private PEM, public authorized_keys line)."""
    private = ec.generate_private_key(ec.SECP521R1())
    private_pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                        serialization.NoEncryption())
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private_pem, public + b"\n"


def with_ssh_keys(desired: list[dict[str, Any]], existing: set[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """`desired` with a fresh key pair in each SSH Secret that does not exist yet; an existing one keeps its keys
    (the reconciler never compares or patches a Secret's data)."""
    return [_keyed(child) if _new_ssh_secret(child, existing) else child for child in desired]


def _new_ssh_secret(child: dict[str, Any], existing: set[tuple[str, str, str]]) -> bool:
    child_key = (child["apiVersion"], child["kind"], child["metadata"]["name"])
    return child["kind"] == "Secret" and child.get("type") == SSH_SECRET_TYPE and child_key not in existing


def _keyed(secret: dict[str, Any]) -> dict[str, Any]:
    private_pem, public = key_pair()
    return {**secret, "data": {PRIVATE_KEY: base64.b64encode(private_pem).decode(),
                               PUBLIC_KEY: base64.b64encode(public).decode()}}
