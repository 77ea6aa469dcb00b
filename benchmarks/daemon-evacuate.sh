#!/usr/bin/env bash
# Draining the SSD under load, through the daemon on modelled drives on the
# real clock (issue "Operate it, part two"): how long does `tierctl evacuate
# ssd` take, and what does a reader of data on the SSD see meanwhile?
#
#   benchmarks/daemon-evacuate.sh [--data SIZE] [--before S] [--after S]
#                                 [--tierd-args "ARGS"] [--json FILE]
#
# Set-up: 1 GiB ssd-sata + 8 GiB hdd-5400 models (reserve 256 MiB); --data
# (default 512m) written sequentially at offset 0, so it lands on the SSD.
# fio reads 4 KiB at random over that data (Zipf 0.99, QD 4, one
# connection) for --before seconds (default 10), then `tierctl evacuate
# ssd --no-wait` starts the draining, and fio goes on until --after seconds
# (default 30) past the end of the draining. Reported: the draining's
# seconds and MiB/s (status polled once a second), and the fio IOPS median
# before, during and after it.
#
# TIERD and TIERCTL name the binaries (default target/release/…); PORT
# (default 10942) the NBD port.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10942}
DATA=512m BEFORE=10 AFTER=30 JSON="" TIERD_ARGS=""
while [ $# -gt 0 ]; do
  case $1 in
    --data) DATA=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --tierd-args) TIERD_ARGS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "daemon-evacuate.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in fio nbdinfo python3; do
  command -v $tool >/dev/null || { echo "daemon-evacuate.sh: $tool is not installed" >&2; exit 1; }
done
[ -x "$TIERD" ] && [ -x "$TIERCTL" ] || { echo "daemon-evacuate.sh: build first (cargo build --release)" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/evacuate.XXXX)
ctl() { "$TIERCTL" --control "$dir/control.sock" "$@"; }
"$TIERD" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
  --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
  --control "$dir/control.sock" $TIERD_ARGS >"$dir/log" 2>&1 &
pid=$!
cleanup() { kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -f "$dir"/*.img; }
trap cleanup EXIT
for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
kill -0 $pid 2>/dev/null || { echo "daemon-evacuate.sh: tierd did not start:" >&2; tail -5 "$dir/log" >&2; exit 1; }
echo "writing $DATA ..."
fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m --iodepth=4 \
  --size="$DATA" --output=/dev/null >/dev/null
ctl --json status >"$dir/start.json"
# fio for long enough; stopped once the draining ended AFTER seconds ago.
fio --name=read --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=randread --bs=4k --iodepth=4 \
  --size="$DATA" --random_distribution=zipf:0.99 --time_based --runtime=3600 \
  --write_iops_log="$dir/read" --log_avg_msec=1000 --output=/dev/null >/dev/null &
fio_pid=$!
t0=$(date +%s.%N)
sleep "$BEFORE"
ts=$(date +%s.%N)
ctl evacuate ssd --no-wait
: >"$dir/drain.jsonl"
while :; do
  ctl --json status | tr -d '\n' >>"$dir/drain.jsonl"; echo >>"$dir/drain.jsonl"
  if tail -1 "$dir/drain.jsonl" | python3 -c 'import json,sys; e=json.load(sys.stdin)["evacuation"]; sys.exit(0 if e and e["done"] else 1)'; then
    break
  fi
  sleep 1
done
te=$(date +%s.%N)
sleep "$AFTER"
kill -INT $fio_pid 2>/dev/null; wait $fio_pid 2>/dev/null || true
python3 - "$dir" "$t0" "$ts" "$te" "$JSON" <<'EOF'
import json, statistics, sys
d, t0, ts, te, out = sys.argv[1], *map(float, sys.argv[2:5]), sys.argv[5]
start = json.load(open(f"{d}/start.json"))
moved = start["tiers"][0]["used_bytes"]
iops = []
for line in open(f"{d}/read_iops.1.log"):
    f = [x.strip() for x in line.split(",")]
    iops.append((int(f[0]) / 1000.0, float(f[1])))
def med(a, b):
    v = [y for x, y in iops if a <= x < b]
    return statistics.median(v) if v else float("nan")
s, e = ts - t0, te - t0
r = {
    "data_on_ssd_bytes": moved,
    "drain_secs": round(te - ts, 1),
    "drain_mib_s": round(moved / (1 << 20) / max(te - ts, 1e-9), 1),
    "iops_before": med(0, s),
    "iops_during": med(s + 1, e),
    "iops_after": med(e + 2, e + 1e9),
}
print(f"drained {moved/(1<<20):.0f} MiB off the SSD in {r['drain_secs']} s ({r['drain_mib_s']} MiB/s)")
print(f"fio randread 4k QD4 IOPS, median: before {r['iops_before']:.0f}, during {r['iops_during']:.0f}, after {r['iops_after']:.0f}")
if out:
    json.dump(r, open(out, "w"), indent=2)
EOF
