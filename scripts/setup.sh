#!/usr/bin/env bash
# Install what building and testing r8s needs on a fresh Debian 12 machine (run as root).
# Safe to run again: it installs only what is missing.
set -euo pipefail

need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)   # etcd-client compiles etcd's protos
command -v etcd >/dev/null || need+=(etcd-server)           # the etcd backend's tests and benchmark
command -v cc >/dev/null || need+=(build-essential)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's etcd-server starts a system etcd on 127.0.0.1:2379 where an init system runs;
# r8s's tests start their own etcd processes on free ports and never use it.
command -v cargo >/dev/null || { echo "setup: cargo (Rust stable) is required" >&2; exit 1; }
