#!/usr/bin/env bash
# Run upstream's conformance suite (the [Conformance] specs of Kubernetes' e2e tests, v1.33)
# against a multi-node r8s cluster on this machine, and tear the cluster down after:
#
#   scripts/conformance.sh [--focus REGEX | --subset FILE] [--skip REGEX] [--labels EXPR] [--nodes N]
#                          [--procs P] [--report-dir DIR] [--no-serial] [--keep]
#
# It builds what is missing (cached under target/: r8s, the suite and its images), brings up
# `scripts/multi-node.sh up N` (N ≥ 2: the suite wants two schedulable nodes), waits until every
# node has imported the suite's images, runs the parallel pass (everything but [Serial], P ginkgo
# processes) and then the serial pass, writes the JUnit reports and a summary by area
# (DIR/summary.md), and removes the cluster. The real kubectl (kubectl.1.33) is the suite's.
#   --focus REGEX   only specs matching it (always within [Conformance]); default all of them
#   --subset FILE   only the specs FILE names, one whole spec name a line (# comments);
#                   conformance/ci-subset.txt is the one scripts/test.sh (and CI) runs
#   --skip REGEX    leave these out too
#   --labels EXPR   the suite's label filter instead of Conformance (e.g. '!Feature && !Flaky &&
#                   !Disruptive' with --focus to run an area's other specs too; Serial is added)
#   --no-serial     the parallel pass only
#   --keep          leave the cluster up (its kubeconfig is printed); `scripts/multi-node.sh down`
#                   removes it
# Environment: R8S_BIN (default target/release/r8s, built if missing), R8S_CONFORMANCE_DIR (the
# cluster's directory, default /tmp/r8s-conformance).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

focus='' skip='' labels=Conformance nodes=2 procs=4 report='' serial=1 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --focus) focus=$2; shift 2 ;;
    --subset)
      # Each line a literal spec name: regex metacharacters escaped, the lines joined by |.
      focus=$(grep -v '^[[:space:]]*\(#\|$\)' "$2" | sed 's/[][\\.*^$()+?{}|]/\\&/g' | paste -sd '|')
      [ -n "$focus" ] || { echo "conformance: no spec names in $2" >&2; exit 2; }
      shift 2
      ;;
    --skip) skip=$2; shift 2 ;;
    --labels) labels=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --report-dir) report=$2; shift 2 ;;
    --no-serial) serial=0; shift ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--focus REGEX | --subset FILE] [--skip REGEX] [--labels EXPR] [--nodes N] [--procs P] [--report-dir DIR] [--no-serial] [--keep]" >&2; exit 2 ;;
  esac
done
[ "$nodes" -ge 2 ] || { echo "conformance: the suite needs at least 2 nodes" >&2; exit 2; }
say() { echo "conformance: $*" >&2; }
report=${report:-$root/target/conformance/report-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$report"
report=$(cd "$report" && pwd)
start=$SECONDS
# The commit the run is of (the tree may move on while it runs), "+dirty" with local changes.
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo +dirty)

# --- What the run needs -------------------------------------------------------------------------
scripts/setup.sh >&2
kubectl_bin=$(command -v kubectl.1.33 || echo /usr/lib/google-cloud-sdk/bin/kubectl.1.33)
[ -x "$kubectl_bin" ] || { say "no kubectl.1.33"; exit 1; }
bin=${R8S_BIN:-$root/target/release/r8s}
if [ -z "${R8S_BIN:-}" ]; then
  say "building r8s (release)"
  cargo build --release --locked -p r8s --bins >&2
fi
[ -x "$bin" ] || { say "no r8s at $bin"; exit 1; }
bindir=$(conformance/build.sh "$root/target/conformance/bin")
[ -f target/test-images/pause-image.txt ] || scripts/build-test-images.sh target/test-images >/dev/null
images=$root/target/conformance/images
if [ ! -f "$images/e2e-pause.tar" ] || [ -n "$(find conformance/build-images.sh scripts/oci-image-lib.sh \
  "$bindir/agnhost" target/test-images/pause.tar -newer "$images/e2e-pause.tar")" ]; then
  say "building the suite's images"
  rm -rf "$images"
  conformance/build-images.sh "$images" "$bindir"
fi
# What each node imports at start: r8s's own images (its pause among them) and the suite's.
node_images=$root/target/conformance/node-images
rm -rf "$node_images"
mkdir -p "$node_images"
ln -f target/test-images/{busybox,nginx,pause}.tar "$images"/e2e-*.tar "$node_images/"
cp target/test-images/pause-image.txt "$node_images/"

# --- The cluster --------------------------------------------------------------------------------
dir=${R8S_CONFORMANCE_DIR:-/tmp/r8s-conformance}
[ ! -e "$dir" ] || scripts/multi-node.sh down "$dir" >&2
# The suite's process runs on the host, outside the nodes: what it might send to the cluster's
# pod and Service ranges must not leave the machine. Blackhole routes for them while it runs.
routes=()
for cidr in 10.42.0.0/16 10.43.0.0/16; do
  if ! ip route show exact "$cidr" | grep -q .; then
    ip route add blackhole "$cidr"
    routes+=("$cidr")
  fi
done
teardown() {
  local status=$?
  set +e
  if [ "$keep" = 1 ]; then
    say "the cluster stays up: kubectl --kubeconfig $dir/kubeconfig.yaml; scripts/multi-node.sh down $dir"
  else
    for n in $(seq "$nodes"); do cp -f "$dir/node$n/log" "$report/node$n.log" 2>/dev/null; done
    scripts/multi-node.sh down "$dir" >&2
  fi
  for cidr in "${routes[@]}"; do ip route del blackhole "$cidr" 2>/dev/null; done
  rm -rf "$node_images"
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM
R8S_BIN=$bin R8S_IMAGES=$node_images scripts/multi-node.sh up "$nodes" "$dir" >&2
kubeconfig=$dir/kubeconfig.yaml
export KUBECONFIG=$kubeconfig

# Every node imports the images at start without holding up its registration: wait until each
# reports all of them, so no spec's pod tries a registry.
mapfile -t refs < <(cat "$images"/*.ref)
say "waiting for ${#refs[@]} images on $nodes nodes"
for ((t = 0; t < 600; t++)); do
  missing=$("$kubectl_bin" get nodes -o json | jq -r --argjson refs "$(printf '%s\n' "${refs[@]}" | jq -R . | jq -s .)" \
    '[.items[] | . as $n | ([.status.images[]?.names[]?]) as $have
      | $refs[] | select(. as $r | $have | index($r) | not) | "\($n.metadata.name): \(.)"] | .[]')
  [ -z "$missing" ] && break
  sleep 1
done
[ -z "$missing" ] || { say "images still missing after 10 min: $missing"; exit 1; }

# --- The suite ----------------------------------------------------------------------------------
e2e_args=(--kubeconfig="$kubeconfig" --provider=local --kubectl-path="$kubectl_bin"
  --dns-domain=cluster.local --ginkgo.timeout=24h --ginkgo.no-color)
# The suite's labels pick the conformance specs (and the serial ones); --focus narrows them.
focus_args=()
[ -z "$focus" ] || focus_args=(--focus="$focus")
skip_args=()
[ -z "$skip" ] || skip_args=(--skip="$skip")
status=0
say "parallel pass ($procs processes)"
mkdir -p "$report/parallel"
"$bindir/ginkgo" --procs="$procs" --timeout=24h --no-color --label-filter="($labels) && !Serial" \
  "${focus_args[@]}" "${skip_args[@]}" \
  "$bindir/e2e.test" -- "${e2e_args[@]}" --report-dir="$report/parallel" \
  >"$report/parallel.log" 2>&1 || status=1
tail -5 "$report/parallel.log" >&2
if [ "$serial" = 1 ]; then
  say "serial pass"
  mkdir -p "$report/serial"
  "$bindir/e2e.test" "${e2e_args[@]}" --ginkgo.label-filter="($labels) && Serial" \
    "${focus_args[@]/#--/--ginkgo.}" "${skip_args[@]/#--/--ginkgo.}" \
    --report-dir="$report/serial" >"$report/serial.log" 2>&1 || status=1
  tail -5 "$report/serial.log" >&2
fi
wall=$((SECONDS - start))
# A run of other labels than Conformance counts every spec it ran.
all_args=()
[ "$labels" = Conformance ] || all_args=(--all)
python3 conformance/summarize.py "${all_args[@]}" --wall "$wall" --commit "$commit" \
  "$report"/*/junit*.xml >"$report/summary.md"
say "wall time ${wall}s; summary in $report/summary.md"
grep -m1 '^passed' "$report/summary.md" >&2 || true
# A focus that matched nothing is a mistake, not a pass.
if grep -q '^passed 0, failed 0' "$report/summary.md"; then
  say "no spec ran"
  status=1
fi
exit "$status"
