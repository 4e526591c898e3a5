#!/usr/bin/env bash
# Issue 42's overhead check: the API and pod-start benchmarks with the journey recorder behind
# `r8s trace` on (the default) and off (`--trace-ring-size 0`, given through
# R8S_TRACE_RING_SIZE, which the benchmarks' servers inherit), alternately, in one run.
#
#   cargo build --release -p r8s --bins --examples && scripts/trace-overhead.sh [ROUNDS]
#
# Runs as root (pod-bench runs containers). Prints each benchmark's own report, headed by the
# round and the mode; BENCHMARKS.md ("r8s trace") has the table of a run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=target/release/examples
for round in $(seq "$rounds"); do
  for mode in on off; do
    if [ "$mode" = off ]; then export R8S_TRACE_RING_SIZE=0; else unset R8S_TRACE_RING_SIZE; fi
    echo "== api-bench, tracing $mode, round $round"
    "$bin/api-bench" --pods 2000 --watchers 200 --updates 200
    echo "== pod-bench, tracing $mode, round $round"
    "$bin/pod-bench"
  done
done
