#!/usr/bin/env bash
# The stock Pythons this machine has, one path a line: Debian's /usr/bin/python3 and each pyenv Python from 3.11 on
# (PYENV_ROOT, else ~/.pyenv). Fails when there is none. tools/stock-pythons.sh and tools/light-pythons.sh read it.
set -euo pipefail
found=0
if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; found=1; fi
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3; do
  [ -x "$candidate" ] || continue
  if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then echo "$candidate"; found=1; fi
done
[ "$found" = 1 ] || { echo "find-pythons: no Python 3.11+ found" >&2; exit 1; }
