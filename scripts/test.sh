#!/usr/bin/env bash
# Installs what the tests need (Debian's zookeeper, kcat, tshark, chromium, systemd-analyze; the Python test extras into .venv), checks style,
# and runs every test. pytest's exit code 5 (no tests collected) is a failure here, not a success.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
need=()
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v kcat >/dev/null || need+=(kcat)
command -v tshark >/dev/null || need+=(tshark)
command -v chromium >/dev/null || need+=(chromium)
command -v systemd-analyze >/dev/null || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
scripts/venv.sh test
.venv/bin/ruff check .
# Compiled modules are kept (under .venv, out of the tree) even where the environment says not to write them: without
# them every moverd, tool and Spark worker the tests start compiles the package again, and each pytest worker
# rewrites every test module's asserts at collection (17 s -> 6 s per collection here).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$root/.venv/pycache"
set +e
# Three workers on the two cores, a whole test file each at a time (tests/conftest.py; a Spark session per worker that
# needs one): module-scoped clusters start once, and the files that mostly wait (throttled moves, disks filling at set
# rates) run beside the CPU-bound rest. With two workers the cores sat idle 28% of the run (docs/architecture.md, "The
# test suite: where its time goes"). PYTEST_WORKERS=0 runs in one process.
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadgroup "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
