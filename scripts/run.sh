#!/usr/bin/env bash
# Set up a fresh machine, build r8s and run a single-node cluster on the embedded datastore:
# API server, controllers, scheduler and the agent (containerd + CNI) in one process.
# Extra arguments go to `r8s server` (for example --data-dir /tmp/r8s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The `dist` profile (Cargo.toml): whole-program LTO, optimised for size, no symbol table: a
# 40 MB binary, as fast as the release build in the API and pod-start benchmarks (BENCHMARKS.md).
cargo build --profile dist --locked -p r8s
# The client is in the binary (`r8s kubectl`), as k3s bundles kubectl: put `r8s` on the PATH,
# and `kubectl` too where none is installed.
bin_dir=/usr/local/bin
[ "$(id -u)" = 0 ] || bin_dir=$HOME/.local/bin
mkdir -p "$bin_dir"
ln -sf "$PWD/target/dist/r8s" "$bin_dir/r8s"
command -v kubectl >/dev/null || ln -sf "$PWD/target/dist/r8s" "$bin_dir/kubectl"
# The data dir r8s will use (as `r8s server` picks it), so the agent finds its images there.
data_dir=${R8S_DATA_DIR:-/var/lib/r8s}
[ "$(id -u)" = 0 ] || data_dir=${R8S_DATA_DIR:-$HOME/.r8s}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --data-dir | -d) data_dir=${args[$((i + 1))]:-$data_dir} ;;
    --data-dir=*) data_dir=${args[$i]#--data-dir=} ;;
  esac
done
# No registry is reachable: build nginx, busybox and the pause image from Debian packages
# into the directory the agent imports at start.
scripts/build-test-images.sh "$data_dir/agent/images" >/dev/null
exec target/dist/r8s server "$@"
