#!/usr/bin/env bash
# Sets up .venv and runs moverd on its embedded default configuration: two log dirs under ./var, broker 0,
# Kafka protocol on 127.0.0.1:9092, no ZooKeeper. Extra arguments go to moverd (e.g. --config server.properties).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/venv.sh"
cd "$root"
exec .venv/bin/moverd "$@"
