#!/usr/bin/env bash
# Set up a fresh machine, build r8s and run a single-node server on the embedded datastore.
# Extra arguments go to `r8s server` (for example --data-dir /tmp/r8s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -p r8s
exec target/release/r8s server "$@"
