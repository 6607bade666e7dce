"""Every command that talks to a cluster says in one line that the API server cannot be reached, names it, and
exits 2, without a traceback. The server is real and unreachable: a loopback port nothing listens on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MLGATE = [sys.executable, "-m", "mlgate"]
COMMANDS = {
    "operator --once": ["operator", "--once"],
    "webhook uninstall": ["webhook", "uninstall"],
    "webhook rotate-ca": ["webhook", "rotate-ca"],
    "validate --cluster": ["validate", "--cluster"],
    "facts dump": ["facts", "dump"],
}


@pytest.fixture(scope="module")
def gone(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = f"https://127.0.0.1:{sock.getsockname()[1]}"
    config = tmp_path_factory.mktemp("gone") / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}), encoding="utf-8")
    return server, config


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreachable_api_server_is_one_line_naming_it_and_exit_2(command: str, gone: tuple[str, Path]) -> None:
    server, config = gone
    run = subprocess.run([*MLGATE, *COMMANDS[command], "--kubeconfig", str(config)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(("mlgate: ", "mlgate operator: ")) and f"{server}: " in lines[0], lines[0]
    assert "cannot reach the API server: NewConnectionError: " in lines[0] and "Connection refused" in lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
