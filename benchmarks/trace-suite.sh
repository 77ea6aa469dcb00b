#!/usr/bin/env bash
# The trace suite: the four generated shapes (tierd trace generate: zipf,
# shift, scan-hot, database) and any traces given, replayed by `tierd bench
# --trace` in virtual time on the hybrid, a pure SSD and a pure HDD, beside
# LRU, LFU, ARC, an smq-like policy, the popularity oracle and the offline
# optimum. Prints one row per trace: the SSD read-hit share of each, the
# hybrid's against the optimum, the oracle's against the optimum (the most
# an online policy gets on independent references), the hybrid's against
# the best of LRU, ARC and smq-like, and migration bytes per host byte.
#
#   benchmarks/trace-suite.sh [--ssd-size SIZE] [--hdd-size SIZE]
#                             [--requests N] [--out DIR] [TRACE...]
#
# TRACE may be any format tierd reads (tierd trace info says which), e.g.
# libCacheSim's data/cloudPhysicsIO.csv (a production VM, 2 hours): run it
# with --ssd-size 1GiB to compare with the measurement. TIERD
# names the binary (default target/release/tierd).
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
SSD=4GiB HDD=32GiB REQUESTS=200000 OUT=""
TRACES=()
while [ $# -gt 0 ]; do
  case $1 in
    --ssd-size) SSD=$2; shift 2 ;;
    --hdd-size) HDD=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "trace-suite.sh: unknown argument $1" >&2; exit 2 ;;
    *) TRACES+=("$1"); shift ;;
  esac
done
command -v jq >/dev/null || { echo "trace-suite.sh: jq is not installed" >&2; exit 1; }
[ -x "$TIERD" ] || { echo "trace-suite.sh: build first (cargo build --release)" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/trace-suite.XXXX)
trap 'rm -rf "$WORK"' EXIT
[ -n "$OUT" ] || OUT=trace-suite-report
ARGS=()
for shape in zipf shift scan-hot database; do
  "$TIERD" trace generate "$shape" "$WORK/$shape.trace" --requests "$REQUESTS" 2>/dev/null
  ARGS+=(--trace "$WORK/$shape.trace")
done
for t in "${TRACES[@]}"; do ARGS+=(--trace "$t"); done
"$TIERD" bench "${ARGS[@]}" --ssd-size "$SSD" --hdd-size "$HDD" --json --out "$OUT" >"$WORK/record.json"
jq -r '
  [.findings[] | select(.suite == "trace")] as $f
  | ($f | map(.name | split("/")[0]) | unique) as $traces
  | ["trace", "hybrid", "lru", "lfu", "arc", "smq", "popular", "optimal", "hyb/opt", "pop/opt", "hyb-best", "hyb-mig", "lru-mig"],
    ($traces[] as $t
      | def v($n): ($f[] | select(.name == ($t + "/" + $n)) | .value);
        def note($n): ($f[] | select(.name == ($t + "/" + $n)) | .note);
        [$t, (v("hybrid-read-hit-share") | . * 1000 | round / 1000),
         (v("lru-read-hit-share") | . * 1000 | round / 1000),
         (v("lfu-read-hit-share") | . * 1000 | round / 1000),
         (v("arc-read-hit-share") | . * 1000 | round / 1000),
         (v("smq-read-hit-share") | . * 1000 | round / 1000),
         (v("popular-read-hit-share") | . * 1000 | round / 1000),
         (v("optimal-read-hit-share") | . * 1000 | round / 1000),
         (v("hybrid-vs-optimal") | . * 100 | round / 100),
         (v("popular-vs-optimal") | . * 100 | round / 100),
         (v("hybrid-minus-best-classic") | . * 1000 | round / 1000),
         (v("hybrid-migration-per-host-byte") | . * 100 | round / 100),
         (note("lru-read-hit-share") | capture("migration (?<m>[0-9.]+)").m)])
  | @tsv' "$WORK/record.json" | column -t
echo "report: $OUT/report.md (charts: read-hit share against SSD size per trace)"
