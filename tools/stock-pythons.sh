#!/usr/bin/env bash
# `make setup` and the main job's first steps on every stock Python this machine has: Debian's /usr/bin/python3
# and each pyenv Python from 3.11 on. The default python3 can hide breakage (it imports some standard-library
# modules before the working directory joins sys.path), so a green run here is what says a stock Python works.
# Each Python gets its own venv under a temporary folder; the checkout's .venv is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

found=$(tools/find-pythons.sh)
mapfile -t pythons <<< "$found"

for python in "${pythons[@]}"; do
  version=$("$python" -c 'import platform; print(platform.python_version())')
  venv="$WORK/venv-$version"
  echo "stock-pythons: $python ($version)"
  make --no-print-directory setup PYTHON="$python" VENV="$venv" > "$WORK/setup.log" 2>&1 \
    || { cat "$WORK/setup.log" >&2; echo "stock-pythons: make setup failed with $python" >&2; exit 1; }
  # from the repository root, as `make run` and `make demo` start them
  "$venv/bin/python" -c 'import mlgate, mlgate_webhook, mlgate_certs, mlgate_reconciler, mlgate_audit'
  status=0; "$venv/bin/mlgate" validate examples/ > /dev/null || status=$?
  [ "$status" -le 1 ] || { echo "stock-pythons: mlgate validate examples/ exited $status with $python" >&2; exit 1; }
  "$venv/bin/python" tools/serve_smoke.py "$venv/bin/mlgate"
done
echo "stock-pythons: ${#pythons[@]} Pythons set up and served"
