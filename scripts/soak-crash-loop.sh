#!/usr/bin/env bash
# The SIGKILL crash loop (tests/crash_loop.rs) for many cycles against the
# real tierd binary, with a one-line summary. Not run by CI.
#
#   scripts/soak-crash-loop.sh [CYCLES]
#
# CYCLES kill cycles (default 1000), passed to the test as
# TIERD_SOAK_CYCLES. TIERD_CRASH_SEED, if set, picks the seed (the test's
# default otherwise). The full output goes to
# ${CARGO_TARGET_DIR:-target}/soak-crash-loop.log; a failure prints the
# seed and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-1000}"
case "$cycles" in
    '' | *[!0-9]*) echo "usage: $0 [CYCLES]  (CYCLES must be a number, got '$cycles')" >&2; exit 2 ;;
esac
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
log="$target/soak-crash-loop.log"
# The test binary finds tierd next to its own deps directory.
cargo build --workspace --bins --quiet
cargo test --no-run --quiet --test crash_loop
start=$(date +%s)
status=0
TIERD_SOAK_CYCLES="$cycles" cargo test --quiet --test crash_loop -- --nocapture >"$log" 2>&1 || status=$?
secs=$(($(date +%s) - start))
seed=$(sed -n 's/.*seed \(0x[0-9a-f]*\).*/\1/p' "$log" | head -n 1)
if [ "$status" -eq 0 ] && summary=$(grep -m 1 "crash loop passed" "$log"); then
    echo "soak-crash-loop: PASSED in ${secs}s, seed ${seed:-?}: ${summary#*crash loop passed: }"
else
    why=$(grep -m 1 -A 1 -E "panicked|^error" "$log" | tr -s '\n' ' ' || true)
    why=${why:-exit status $status}
    echo "soak-crash-loop: FAILED after ${secs}s, seed ${seed:-?} ($why); replay: TIERD_CRASH_SEED=${seed:-?} TIERD_SOAK_CYCLES=$cycles cargo test --test crash_loop -- --nocapture; log: $log"
    exit 1
fi
