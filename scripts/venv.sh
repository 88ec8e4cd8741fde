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
  # setuptools (>= 77) ends every editable install with an "Editable installation" notice (a warning the build
  # backend raises, shown through pip even with --quiet): information, not a problem, and noise on every set-up.
  export PYTHONWARNINGS="ignore:Editable installation"
  if [ -n "$extra" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extra]"
  else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
  fi
  touch "$stamp"
fi
