#!/usr/bin/env bash
# Crash loops against the real tierd binary for many cycles, one summary
# line per case. Not run by CI.
#
#   scripts/soak-crash-loop.sh [--case kill|power-cut|ssd-loss|all] [--cycles N] [--release] [CYCLES]
#
# Cases:
#   kill       the SIGKILL crash loop (tests/crash_loop.rs): one connection,
#              writes, trims, FUA, flushes, the migrator busy; then the same
#              with the HDD tier on nbdkit, half as many cycles.
#   power-cut  writes on two connections, FLUSH on a third, then SIGKILL
#              and a power cut: unsynced writes dropped from the images and
#              the metadata store (tests/power_cut_connections.rs, on the
#              FUSE filesystem of tests/power_fs; needs root and /dev/fuse).
#   ssd-loss   the SSD dies at a random moment under the SSD exposure
#              bound: nothing flushed more than the bound before is lost,
#              and reads never return older data. N model trials on a
#              manual clock (tests/ssd_exposure_bound.rs, 30 s bound), and
#              N/100 trials of a real daemon whose SSD image starts failing
#              every request (tests/ssd_loss_bound.rs, 3 s bound; FUSE,
#              needs root).
#   all        all three, one after the other (the default is kill).
#
# N (or CYCLES; default 1000) cycles per case, passed to the test as
# TIERD_SOAK_CYCLES. TIERD_CRASH_SEED, if set, picks the seed (each test's
# default otherwise). --release builds and runs optimised. The full output
# of a case goes to ${CARGO_TARGET_DIR:-target}/soak-crash-loop[-CASE].log;
# a failure prints the seed and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: $0 [--case kill|power-cut|ssd-loss|all] [--cycles N] [--release] [CYCLES]" >&2; exit 2; }
case_="kill"
cycles=1000
profile=()
while [ $# -gt 0 ]; do
    case "$1" in
        --case) [ $# -ge 2 ] || usage; case_="$2"; shift 2 ;;
        --cycles) [ $# -ge 2 ] || usage; cycles="$2"; shift 2 ;;
        --release) profile=(--release); shift ;;
        -h | --help) usage ;;
        *) cycles="$1"; shift ;;
    esac
done
case "$cycles" in
    '' | *[!0-9]*) echo "$0: CYCLES must be a number, got '$cycles'" >&2; usage ;;
esac
case "$case_" in
    kill | power-cut | ssd-loss | all) ;;
    *) echo "$0: unknown case '$case_'" >&2; usage ;;
esac
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
# The test binaries find tierd next to their own deps directory.
cargo build "${profile[@]}" --workspace --bins --quiet

# run_case NAME TEST FILTER SUMMARY LOG: one soak case and its summary line.
run_case() {
    local name="$1" test="$2" filter="$3" summary="$4" log="$5"
    cargo test "${profile[@]}" --no-run --quiet --test "$test"
    local start status=0 secs seed line why
    start=$(date +%s)
    local only=()
    [ -z "$filter" ] || only=(--exact "$filter")
    TIERD_SOAK_CYCLES="$cycles" cargo test "${profile[@]}" --quiet --test "$test" -- \
        "${only[@]}" --nocapture >"$log" 2>&1 || status=$?
    secs=$(($(date +%s) - start))
    seed=$(sed -n 's/.*seed \(0x[0-9a-f]*\).*/\1/p' "$log" | head -n 1)
    if [ "$status" -eq 0 ] && line=$(grep -m 1 "$summary" "$log"); then
        echo "soak-crash-loop $name: PASSED in ${secs}s, seed ${seed:-?}: ${line#*"$summary": }"
    else
        why=$(grep -m 1 -A 1 -E "panicked|^error" "$log" | tr -s '\n' ' ' || true)
        why=${why:-exit status $status}
        echo "soak-crash-loop $name: FAILED after ${secs}s, seed ${seed:-?} ($why); replay: TIERD_CRASH_SEED=${seed:-?} TIERD_SOAK_CYCLES=$cycles cargo test ${profile[*]} --test $test -- ${only[*]} --nocapture; log: $log"
        return 1
    fi
}

failed=0
if [ "$case_" = kill ] || [ "$case_" = all ]; then
    # Both tests of the file: local images, and the HDD tier on nbdkit
    # (half the cycles).
    run_case kill crash_loop "" "crash loop passed" "$target/soak-crash-loop.log" || failed=1
fi
if [ "$case_" = power-cut ] || [ "$case_" = all ]; then
    run_case power-cut power_cut_connections \
        a_flush_covers_other_connections_writes_across_a_power_cut \
        "power cut across connections passed" "$target/soak-crash-loop-power-cut.log" || failed=1
fi
if [ "$case_" = ssd-loss ] || [ "$case_" = all ]; then
    run_case ssd-loss-model ssd_exposure_bound \
        an_ssd_that_dies_loses_nothing_flushed_before_the_bound \
        "ssd loss model passed" "$target/soak-crash-loop-ssd-loss-model.log" || failed=1
    run_case ssd-loss ssd_loss_bound \
        a_dying_ssd_loses_nothing_flushed_before_the_bound \
        "ssd loss passed" "$target/soak-crash-loop-ssd-loss.log" || failed=1
fi
exit "$failed"
