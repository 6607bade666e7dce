"""Fixtures: one server per test module on the test policies, an httpx client, a private policy copy."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from webhook_harness import TEST_POLICIES, TLSFiles, client, make_certs, start_webhook

from mlgate_webhook.server import Webhook


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def webhook(tls_files: TLSFiles) -> Iterator[Webhook]:
    server = start_webhook(tls_files, [TEST_POLICIES])
    yield server
    server.stop()


@pytest.fixture
def http(webhook: Webhook, tls_files: TLSFiles) -> Iterator[httpx.Client]:
    with client(webhook, tls_files) as c:
        yield c


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A private copy of the test policies, for tests that change them."""
    target = tmp_path / "policies"
    shutil.copytree(TEST_POLICIES, target)
    return target
