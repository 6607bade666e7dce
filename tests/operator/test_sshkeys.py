import base64

from builders import change, trainingjob
from cryptography.hazmat.primitives import serialization

from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.sshkeys import with_ssh_keys


def mpi_children() -> list[dict]:
    return desired_children(change(trainingjob(replicas=2), "/spec/framework", "mpi"))


def secret_of(children: list[dict]) -> dict:
    return next(c for c in children if c["kind"] == "Secret")


def test_a_new_ssh_secret_gets_a_p521_key_whose_public_half_is_the_authorized_key():
    data = secret_of(with_ssh_keys(mpi_children(), existing=set()))["data"]
    private = serialization.load_pem_private_key(base64.b64decode(data["ssh-privatekey"]), password=None)
    public_line = base64.b64decode(data["ssh-publickey"])
    assert public_line.startswith(b"ecdsa-sha2-nistp521 ")
    assert public_line.endswith(b"\n")  # one authorized_keys line
    public = serialization.load_ssh_public_key(public_line.strip())
    assert public.public_numbers() == private.public_key().public_numbers()  # type: ignore[union-attr]
    assert b"BEGIN EC PRIVATE KEY" in base64.b64decode(data["ssh-privatekey"])


def test_an_existing_ssh_secret_is_never_given_new_keys():
    children = mpi_children()
    existing = {("v1", "Secret", "llm-ssh")}
    assert "data" not in secret_of(with_ssh_keys(children, existing))


def test_two_jobs_never_share_a_key():
    first = secret_of(with_ssh_keys(mpi_children(), set()))["data"]["ssh-privatekey"]
    second = secret_of(with_ssh_keys(mpi_children(), set()))["data"]["ssh-privatekey"]
    assert first != second
