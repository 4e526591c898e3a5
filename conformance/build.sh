#!/usr/bin/env bash
# Build the judges from this module, at the versions go.mod and go.sum pin, into BINDIR
# (default target/conformance/bin):
#   e2e.test  upstream's e2e suite (go test -c of k8s.io/kubernetes/test/e2e), version v1.33.13
#   ginkgo    the ginkgo CLI matching the ginkgo library the suite links (parallel runs)
#   agnhost   the suite's test image's program (k8s.io/kubernetes/test/images/agnhost)
#   nnp       the nonewprivs image's program (prints its effective uid)
#   sample-apiserver  upstream's sample aggregated API server (k8s.io/sample-apiserver), for the
#             Aggregator spec
# A binary newer than go.mod, go.sum and this script is kept. Go is needed for this only:
# nothing of r8s is built with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bindir=${1:-$here/../target/conformance/bin}
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)
command -v go >/dev/null || { echo "conformance/build: Go is needed to build the suite" >&2; exit 1; }

version=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$here/go.mod")
minor=$(echo "$version" | cut -d. -f2)
ld="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
ld+=" -X k8s.io/component-base/version.gitMinor=$minor"
# -mod=mod: `go mod tidy` records no checksums for the test-only imports of a dependency's
# tests (test/e2e's e2e_test.go); the committed go.sum holds them all, so nothing new is added.
export GOFLAGS=-mod=mod CGO_ENABLED=0

fresh() { # BIN: newer than everything it is built from
  [ -x "$1" ] && [ "$1" -nt "$here/go.mod" ] && [ "$1" -nt "$here/go.sum" ] && [ "$1" -nt "$0" ]
}
cd "$here"
if ! fresh "$bindir/e2e.test"; then
  echo "conformance/build: e2e.test ($version)" >&2
  # -vet=off: vet of upstream's tests is upstream's business, and a newer Go finds more.
  go test -c -vet=off -ldflags "$ld" -o "$bindir/e2e.test" k8s.io/kubernetes/test/e2e
fi
if ! fresh "$bindir/ginkgo"; then
  echo "conformance/build: ginkgo" >&2
  go build -o "$bindir/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
fi
if ! fresh "$bindir/agnhost"; then
  echo "conformance/build: agnhost" >&2
  go build -ldflags "$ld" -o "$bindir/agnhost" k8s.io/kubernetes/test/images/agnhost
fi
if ! fresh "$bindir/sample-apiserver"; then
  echo "conformance/build: sample-apiserver" >&2
  go build -ldflags "$ld" -o "$bindir/sample-apiserver" k8s.io/sample-apiserver
fi
if ! fresh "$bindir/nnp"; then
  echo "conformance/build: nnp" >&2
  go build -o "$bindir/nnp" k8s.io/kubernetes/test/images/nonewprivs
fi
echo "$bindir"
