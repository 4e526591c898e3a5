#!/usr/bin/env bash
# Set up a fresh machine and run every check r8s has: formatting, clippy, unit, integration
# and end-to-end tests. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
