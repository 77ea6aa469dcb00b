#!/usr/bin/env bash
# Long crash soak: the crash-loop test (tests/crash_loop.rs) with many more
# SIGKILL cycles, each with its own seed, against the real tierd binary.
#
#   scripts/soak.sh [CYCLES] [ROUNDS]
#
# CYCLES kill cycles per round (default 1000), ROUNDS rounds with seeds
# 1..ROUNDS (default 1). A failing round prints its seed; replay it with
#   TIERD_CRASH_SEED=<seed> TIERD_SOAK_CYCLES=<cycles> cargo test --test crash_loop -- --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-1000}"
rounds="${2:-1}"
cargo build --workspace --tests
total=0
for seed in $(seq 1 "$rounds"); do
    echo "== soak round $seed/$rounds: $cycles kill cycles, seed $seed"
    if ! TIERD_CRASH_SEED="$seed" TIERD_SOAK_CYCLES="$cycles" \
        cargo test --test crash_loop -- --nocapture 2>&1 | tee "target/soak-$seed.log" | grep -E "crash loop|panicked|test result"; then
        echo "soak round $seed: could not run" >&2
        exit 1
    fi
    if ! grep -q "crash loop passed" "target/soak-$seed.log"; then
        echo "soak round $seed FAILED (seed $seed); log: target/soak-$seed.log" >&2
        exit 1
    fi
    total=$((total + cycles))
done
echo "soak passed: $total kill cycles over $rounds rounds"
