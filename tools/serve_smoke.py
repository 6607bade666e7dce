"""`make run`'s command, started for real: `mlgate serve` on a free loopback port answers /healthz over TLS.

Used by tools/stock-pythons.sh with each stock Python's venv; exits non-zero with the server's output when the
webhook does not come up within 60 s.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(mlgate: str) -> int:
    port = free_port()
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the dev certificates are self-signed; this only asks if it serves
    with tempfile.TemporaryDirectory() as state, tempfile.TemporaryFile() as log:
        server = subprocess.Popen([mlgate, "serve", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "MLGATE_STATE_DIR": state})
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and server.poll() is None:
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=insecure, timeout=2) as r:
                        if r.status == 200:
                            print(f"serve-smoke: {mlgate} serves /healthz on port {port}")
                            return 0
                except OSError:
                    time.sleep(0.3)
        finally:
            server.terminate()
            server.wait(timeout=20)
        log.seek(0)
        sys.stderr.write(log.read().decode(errors="replace"))
    print(f"serve-smoke: {mlgate} did not serve /healthz", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
