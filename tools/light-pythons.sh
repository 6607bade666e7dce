#!/usr/bin/env bash
# The light install (`pip install mlgate`: the core dependencies only) and its tests, tests/light.args, on every
# stock Python tools/find-pythons.sh finds. Each Python gets a venv of its own under a temporary folder, made by uv
# (a few seconds each, where pip takes a minute), holding mlgate as a wheel built once, the core dependencies at the versions
# requirements-dev.lock pins, pytest and hypothesis, and no extra: the run fails if one crept in.
#   tools/light-pythons.sh UV       (make pythons passes the checkout's .venv/bin/uv)
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${1:?usage: tools/light-pythons.sh UV}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# the lock's pins as constraints (pip and uv take no hashes there)
grep -E '^[A-Za-z0-9_.-]+==' requirements-dev.lock | cut -d' ' -f1 > "$WORK/pins.txt"
found=$(tools/find-pythons.sh)
mapfile -t pythons <<< "$found"
# one wheel, built once: two builds at a time in the checkout would share setuptools' build/ folder
"$UV" build --quiet --wheel --out-dir "$WORK/dist" .
WHEEL=$(echo "$WORK"/dist/mlgate-*.whl)
EXTRA_MODULES="fastapi uvicorn kubernetes cryptography prometheus_client jsonschema celpy"

one_python() {  # PYTHON LOG: the venv, the installed command and the light tests on one Python
  local python=$1 log=$2 version venv start status=0
  version=$("$python" -c 'import platform; print(platform.python_version())')
  venv="$WORK/venv-$version"
  start=$(date +%s)
  "$UV" venv --quiet --python "$python" "$venv"
  "$UV" pip install --quiet --python "$venv/bin/python" -c "$WORK/pins.txt" "$WHEEL" pytest hypothesis
  "$venv/bin/python" - "$EXTRA_MODULES" <<'PY'
import importlib.util, sys
present = [m for m in sys.argv[1].split() if importlib.util.find_spec(m) is not None]
sys.exit(f"light-pythons: the light install holds {', '.join(present)}" if present else 0)
PY
  # the installed command, from outside the checkout: the wheel carries the shipped policies
  (cd "$venv" && "$venv/bin/mlgate" validate "$ROOT/examples" > /dev/null 2>&1) || status=$?
  [ "$status" -le 1 ] || { echo "light-pythons: mlgate validate examples/ exited $status with $python"; return 1; }
  "$venv/bin/python" -m pytest -q -p no:cacheprovider @tests/light.args > "$log" 2>&1 \
    || { cat "$log"; echo "light-pythons: the light tests failed with $python"; return 1; }
  echo "light-pythons: $python ($version): $(tail -1 "$log" | tr -d '=') in $(( $(date +%s) - start ))s"
}

# two Pythons at a time: each run is mostly one busy process, and the machine has 2 cores or more
ROOT=$PWD
for (( i = 0; i < ${#pythons[@]}; i += 2 )); do
  pids=()
  for python in "${pythons[@]:i:2}"; do
    one_python "$python" "$WORK/pytest-${#pids[@]}.log" > "$WORK/out-${#pids[@]}.txt" 2>&1 &
    pids+=($!)
  done
  failed=0
  for n in "${!pids[@]}"; do
    wait "${pids[$n]}" || failed=1
    cat "$WORK/out-$n.txt"
  done
  [ "$failed" = 0 ] || exit 1
done
echo "light-pythons: the light install's tests passed on ${#pythons[@]} Pythons"
