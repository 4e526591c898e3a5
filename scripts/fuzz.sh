#!/usr/bin/env bash
# Run r8s's fuzz targets (fuzz/, cargo-fuzz + libFuzzer), each for a bounded time, and keep what
# they learn: inputs that reach new code are merged into fuzz/corpus/<target>/ (commit them),
# crashes are saved in fuzz/artifacts/<target>/ and make the script fail. A crash fixed becomes
# a file in fuzz/regressions/<target>/, which the crates' unit tests replay.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   scripts/fuzz.sh --seconds 600 dns    # one target, ten minutes
#   scripts/fuzz.sh --list
#
# Needs a nightly toolchain (libFuzzer's coverage instrumentation) and cargo-fuzz; both are
# installed when missing. Not part of CI. Each target runs in a network namespace of its own
# with only loopback up (unshare -n, as root), so no input can make r8s dial anything outside.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=60
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --list) sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v r8s-fuzz; exit 0 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v r8s-fuzz)
fi

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# No sanitizer (safe Rust; twice the executions per second on two cores), debug assertions on
# (integer overflow is a bug here too).
cargo +nightly fuzz build --fuzz-dir . -s none -a

bin=target/x86_64-unknown-linux-gnu/release
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
printf '%-14s %8s %12s %10s %8s %s\n' target seconds executions "exec/s" corpus crashes
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t" "$scratch/$t"
    cp -r "corpus/$t/." "$scratch/$t/" 2>/dev/null || true
    before=$(find "artifacts/$t" -type f | wc -l)
    log="$scratch/$t.log"
    unshare --net sh -c "ip link set lo up && exec $bin/$t -max_total_time=$seconds -timeout=30 \
        -rss_limit_mb=8192 -print_final_stats=1 -artifact_prefix=artifacts/$t/ $scratch/$t" \
        >"$log" 2>&1 || true
    # What reached new code goes into the kept corpus (minimised against it).
    unshare --net sh -c "ip link set lo up && exec $bin/$t -merge=1 corpus/$t $scratch/$t" \
        >"$scratch/$t.merge.log" 2>&1 || true
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    crashes=$(( $(find "artifacts/$t" -type f | wc -l) - before ))
    printf '%-14s %8s %12s %10s %8s %s\n' "$t" "$seconds" "${runs:-?}" \
        "$(( ${runs:-0} / seconds ))" "$(find "corpus/$t" -type f | wc -l)" "$crashes"
    if [ "$crashes" -gt 0 ] || grep -q '^==[0-9]*== ERROR\|panicked at' "$log"; then
        failed=1
        echo "--- $t: the fuzzer's report" >&2
        grep -A30 'panicked at\|ERROR: libFuzzer' "$log" | head -60 >&2
        ls "artifacts/$t" >&2
    fi
done
exit $failed
