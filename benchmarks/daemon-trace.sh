#!/usr/bin/env bash
# A block trace replayed through the daemon on modelled drives on the real
# clock, by `tierd trace replay` (docs/trace.md, "Replaying through the
# daemon"): a fresh `tierd serve --ssd-model ssd-sata --hdd-model hdd-5400`
# on image files, the volume laid out as the bench lays it (the trace's
# footprint from the first extent a fill in address order puts on the HDD,
# filler around it up to --fill), the trace sent open loop at its recorded
# times / --speed over --connections. Prints the replayer's JSON report
# (read_hit_share, read/write latency, hdd_busy_s, moved_bytes, how late
# requests were sent); with --bench also `tierd bench --trace` on the same
# sizes, models and speed, and both side by side.
#
#   benchmarks/daemon-trace.sh TRACE [--ssd-size SIZE] [--hdd-size SIZE]
#        [--speed X] [--fill F] [--connections N] [--tierd-args "ARGS"]
#        [--bench] [--out DIR]
#
# Defaults: 1 GiB SSD + 8 GiB HDD, speed 1, fill 0.7, 2 connections. --out
# keeps daemon.json (and bench.json, the bench's report directory, the
# daemon's log) there; default: a temporary directory, removed after.
# TIERD and TIERCTL name the binaries (default target/release/…); PORT
# (default 10951) the NBD port.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10951}
SSD=1GiB HDD=8GiB SPEED=1 FILL=0.7 CONNS=2 TIERD_ARGS="" TRACE="" BENCH=0 OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --ssd-size) SSD=$2; shift 2 ;;
    --hdd-size) HDD=$2; shift 2 ;;
    --speed) SPEED=$2; shift 2 ;;
    --fill) FILL=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --tierd-args) TIERD_ARGS=$2; shift 2 ;;
    --bench) BENCH=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "daemon-trace.sh: unknown argument $1" >&2; exit 2 ;;
    *) TRACE=$1; shift ;;
  esac
done
[ -n "$TRACE" ] || { echo "daemon-trace.sh: name a trace (see --help)" >&2; exit 2; }
command -v jq >/dev/null || { echo "daemon-trace.sh: jq is not installed" >&2; exit 1; }
[ -x "$TIERD" ] && [ -x "$TIERCTL" ] || { echo "daemon-trace.sh: build first (cargo build --release)" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/daemon-trace.XXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  if [ -n "$OUT" ]; then cp "$WORK/tierd.log" "$OUT/" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
KEEP=${OUT:-$WORK}
mkdir -p "$KEEP"
DATA=$WORK/data
# shellcheck disable=SC2086 # TIERD_ARGS is a list of arguments
"$TIERD" serve --data-dir "$DATA" --ssd-size "$SSD" --hdd-size "$HDD" \
  --ssd-model ssd-sata --hdd-model hdd-5400 --listen "127.0.0.1:$PORT" \
  --metrics-listen "" $TIERD_ARGS >"$WORK/tierd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  grep -qs "serving NBD over TCP" "$WORK/tierd.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$WORK/tierd.log" >&2; exit 1; }
  sleep 0.1
done
grep -qs "serving NBD over TCP" "$WORK/tierd.log" || { echo "daemon-trace.sh: tierd did not start" >&2; cat "$WORK/tierd.log" >&2; exit 1; }
echo "== replaying $TRACE through the daemon ($SSD ssd-sata + $HDD hdd-5400, fill $FILL, ${SPEED}x, $CONNS connections)" >&2
"$TIERD" trace replay "$TRACE" --nbd "nbd://127.0.0.1:$PORT" --control "$DATA/control.sock" \
  --speed "$SPEED" --fill "$FILL" --connections "$CONNS" --json >"$KEEP/daemon.json"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
if [ "$BENCH" = 0 ]; then
  cat "$KEEP/daemon.json"
  exit 0
fi
echo "== the same trace in the bench (virtual clock)" >&2
"$TIERD" bench --trace "$TRACE" --trace-speed "$SPEED" --ssd-size "$SSD" --hdd-size "$HDD" \
  --fill "$FILL" --out "$KEEP/bench-report" --json >"$KEEP/bench.json"
jq -n --slurpfile d "$KEEP/daemon.json" --slurpfile b "$KEEP/bench.json" '
  $d[0] as $d | $b[0] as $b
  | ($b.findings | map({key: (.name | sub("^[^/]*/"; "")), value: .value}) | from_entries) as $f
  | ($b.points[] | select(.suite == "trace" and .target == "hybrid")) as $p
  | {
      daemon: ($d | {fill, speed, connections, requests, errors, read_hit_share,
        read_mean_us, read_p50_us, read_p99_us, write_mean_us, write_p50_us,
        write_p99_us, hdd_busy_s, moved_bytes, issue_late_p50_us,
        issue_late_p99_us, write_ssd_share: .counters.write_ssd_share,
        layout, prepared}
        # Reads and writes together, as the bench points give them.
        + {mean_us: ((.measured.read.mean_us * .measured.read.n
            + .measured.write.mean_us * .measured.write.n)
            / ([.measured.read.n + .measured.write.n, 1] | max))}),
      bench: {
        fill: ([$b.points[] | select(.suite == "trace" and .target == "hybrid") | .trace.fill][0]),
        read_hit_share: $f["hybrid-read-hit-share"],
        write_ssd_share: $f["hybrid-write-ssd-share"],
        moved_bytes: $p.trace.moved_bytes,
        mean_us: $p.mean_us, p50_us: $p.p50_us, p99_us: $p.p99_us,
        hdd_busy_s: $f["hybrid-hdd-busy-s"],
        read_mean_us: $f["hybrid-read-mean-us"], read_p99_us: $f["hybrid-read-p99-us"],
        write_mean_us: $f["hybrid-write-mean-us"]
      }
    }'
