#!/usr/bin/env bash
# Creates (or updates) .venv at the repo root with the project and, given "test", what the tests need.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
extra=${1:-}
if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
fi
stamp=".venv/.installed${extra:+-$extra}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  if [ -n "$extra" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extra]"
  else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
  fi
  touch "$stamp"
fi
