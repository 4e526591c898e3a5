#!/usr/bin/env bash
# Install what building and testing r8s needs on a fresh Debian 12 machine (run as root).
# Safe to run again: it installs only what is missing.
set -euo pipefail

need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)   # etcd-client compiles etcd's protos
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)  # ... which import protobuf's own
command -v etcd >/dev/null || need+=(etcd-server)           # the etcd backend's tests and benchmark
command -v etcdctl >/dev/null || need+=(etcd-client)        # r8s etcd-snapshot restore (etcd's own restore)
command -v cc >/dev/null && command -v make >/dev/null || need+=(build-essential)  # ... and busybox for the test images
command -v bzip2 >/dev/null || need+=(bzip2)                  # busybox's source tarball
command -v xz >/dev/null || need+=(xz-utils)                  # ... and Debian's files for it
command -v containerd >/dev/null || need+=(containerd runc)  # the kubelet's container runtime (CRI)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)  # pod networking (CNI)
command -v docker-registry >/dev/null || need+=(docker-registry)  # private-image tests: a registry on loopback
command -v htpasswd >/dev/null || need+=(apache2-utils)       # ... with htpasswd (bcrypt) users
command -v curl >/dev/null || need+=(curl)                     # pod and registry checks in tests
command -v jq >/dev/null || need+=(jq)
command -v nft >/dev/null || need+=(nftables)                # the Service proxy's tests read r8s's table back with nft
command -v ip >/dev/null && command -v bridge >/dev/null || need+=(iproute2)  # network namespaces; the overlay's tests read its entries
command -v pgrep >/dev/null || need+=(procps)                # scripts/multi-node.sh finds and stops its nodes
command -v nsenter >/dev/null || need+=(util-linux)           # ... and runs each in its own namespaces
[ -n "$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null)" ] || need+=(libfaketime)  # ... and jumps one node's clock
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)          # local volumes: a size-limited ext4 image per claim
[ -d /usr/share/zoneinfo/America ] || need+=(tzdata)          # CronJobs' timeZone (the IANA database)
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3 python3-venv)  # the official Python client's tests
command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)  # ... and the JavaScript client's
command -v chromium >/dev/null || need+=(chromium)            # r8s trace's web page, checked in a headless browser
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The real kubectl, every supported minor version side by side (kubectl.1.27 ... kubectl.1.33):
# the end-to-end tests' judge. It comes from the `kubectl` apt package.
if ! command -v kubectl.1.33 >/dev/null && [ ! -x /usr/lib/google-cloud-sdk/bin/kubectl.1.33 ]; then
  echo "setup: installing kubectl"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null \
    || echo "setup: could not install the kubectl package; the end-to-end tests will say so" >&2
fi
# Debian's etcd-server starts a system etcd on 127.0.0.1:2379 where an init system runs;
# r8s's tests start their own etcd processes on free ports and never use it.
command -v cargo >/dev/null || { echo "setup: cargo (Rust stable) is required" >&2; exit 1; }
# The official Python client (PyPI `kubernetes`), a judge of the end-to-end tests, in a venv of
# the checkout's own.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$root/target/clients/python/bin/python" ] || ! "$root/target/clients/python/bin/python" -c 'import kubernetes' 2>/dev/null; then
  echo "setup: installing the Python client (PyPI kubernetes) in target/clients/python"
  python3 -m venv "$root/target/clients/python"
  "$root/target/clients/python/bin/pip" install -q --disable-pip-version-check kubernetes
fi
# The official JavaScript client (npm @kubernetes/client-node, 1.x: 2.x needs Node 22's zstd),
# in the checkout's own node_modules.
if [ ! -d "$root/target/clients/js/node_modules/@kubernetes/client-node" ]; then
  echo "setup: installing the JavaScript client (npm @kubernetes/client-node) in target/clients/js"
  mkdir -p "$root/target/clients/js"
  (cd "$root/target/clients/js" && [ -f package.json ] || echo '{"private": true}' >package.json)
  (cd "$root/target/clients/js" && npm install --silent --no-audit --no-fund '@kubernetes/client-node@1')
fi
