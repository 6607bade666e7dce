#!/usr/bin/env bash
# Install etcd for the local control plane from Debian's etcd-server package.
# Idempotent: does nothing when an `etcd` binary is already on PATH.
set -euo pipefail

if command -v etcd >/dev/null 2>&1; then
    echo "control-plane: etcd present: $(command -v etcd) ($(etcd --version 2>/dev/null | head -n1))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "control-plane: ERROR: etcd is not on PATH and apt-get is missing; install etcd 3.4+ by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
echo "control-plane: installing etcd from Debian's etcd-server package (apt-get)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The package's service is not started here: there is no init system in CI containers and
# the tests start their own etcd on a free loopback port.
$SUDO apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
if ! command -v etcd >/dev/null 2>&1; then
    echo "control-plane: ERROR: etcd-server installed but no etcd on PATH" >&2
    exit 1
fi
echo "control-plane: etcd installed: $(command -v etcd) ($(etcd --version 2>/dev/null | head -n1))"
