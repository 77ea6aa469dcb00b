#!/usr/bin/env bash
# The SSD exposure bound through the daemon on modelled drives (real clock,
# fio's nbd engine): what it keeps, what it costs the users' reads, and how
# long copying takes after a burst larger than the HDD's idle time allows.
#
#   benchmarks/daemon-exposure.sh [TIERD_BINARY]
#
# 1. A sequential fill of FILL (default 3GiB) on a 1 GiB SSD + 16 GiB HDD
#    (ssd-sata + hdd-5400): the SSD takes the first part, the HDD the rest.
# 2. BURST seconds (default 30) of two fio jobs at once: random 4 KiB
#    writes at queue depth 8 into 1 GiB of fresh space after the fill (new
#    data: it lands on the SSD and has no HDD copy), and random 4 KiB reads
#    at queue depth 1 over the HDD-resident part of the fill (the users
#    whose latency the copies must not spoil).
# 3. Idle: the exposure each second until nothing is SSD-only (or IDLE
#    seconds, default 180).
# The status is sampled every second throughout (exposure.txt: seconds,
# SSD-only bytes, oldest age, bound kept).
#
# BOUND sets durability.ssd-exposure (default 30s; 0s: none, the baseline).
set -eu
BIN=${1:-target/release/tierd}
BOUND=${BOUND:-30s}
FILL=${FILL:-3GiB}
BURST=${BURST:-30}
IDLE=${IDLE:-180}
PORT=${PORT:-10962}
TIERCTL=${TIERCTL:-$(dirname "$BIN")/tierctl}
dir=$(mktemp -d /var/tmp/exposure.XXXX)
"$BIN" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 16GiB \
  --ssd-model ssd-sata --hdd-model hdd-5400 --durability.ssd-exposure "$BOUND" \
  --listen 127.0.0.1:$PORT --metrics-listen "" --control "$dir/control.sock" >"$dir/log" 2>&1 &
pid=$!
sampler=
trap 'kill $sampler 2>/dev/null || true; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
fill=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)([KMG]iB)?', '$FILL'); n=int(m.group(1))
print(n * {None:1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m.group(2)])")
start=$(date +%s.%N)
sample() {
  while :; do
    now=$(date +%s.%N)
    "$TIERCTL" --control "$dir/control.sock" --json status 2>/dev/null |
      python3 -c "
import json,sys; s=json.load(sys.stdin)
print(f\"{$now - $start:.0f} {s['ssd_only_bytes']} {s['ssd_only_oldest_s'] or 0:.1f} {s.get('ssd_exposure_bound_kept')}\")" || true
    sleep 1
  done
}
sample >"$dir/exposure.txt" &
sampler=$!
t0=$(date +%s.%N)
fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1M --iodepth=4 \
  --size="$fill" --output="$dir/fill.json" --output-format=json >/dev/null
t1=$(date +%s.%N)
echo "bound $BOUND: filled $FILL in $(echo "$t1 - $t0" | bc) s"
sleep 5
echo "burst at $(python3 -c "print(round($(date +%s.%N) - $start))") s"
fio --output="$dir/burst.json" --output-format=json - >/dev/null <<EOF
[global]
ioengine=nbd
uri=nbd://127.0.0.1:$PORT
bs=4k
time_based
runtime=$BURST
[writes]
rw=randwrite
iodepth=8
offset=$fill
size=1g
[reads]
rw=randread
iodepth=1
offset=1g
size=$((fill - (1 << 30)))
EOF
end=$(python3 -c "print(round($(date +%s.%N) - $start))")
echo "burst ended at $end s"
python3 - "$dir/burst.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"]
w = next(x for x in j if x["jobname"] == "writes")["write"]
r = next(x for x in j if x["jobname"] == "reads")["read"]
p99 = r["clat_ns"]["percentile"].get("99.000000", 0) / 1e6
print(f"burst: writes {w['iops']:.0f} IOPS; reads {r['iops']:.0f} IOPS, mean {r['lat_ns']['mean'] / 1e6:.2f} ms, p99 {p99:.2f} ms")
PY
for _ in $(seq 1 "$IDLE"); do
  b=$(tail -1 "$dir/exposure.txt" | cut -d' ' -f2)
  [ "${b:-1}" = 0 ] && break
  sleep 1
done
sleep 1
kill $sampler 2>/dev/null || true
python3 - "$dir/exposure.txt" "$end" "$BOUND" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 4]
end = int(sys.argv[2])
burst = [r for r in rows if int(r[0]) <= end]
after = [r for r in rows if int(r[0]) > end]
mx = lambda rs, i: max((float(r[i]) for r in rs), default=0)
print(f"during fill and burst: SSD-only at most {mx(burst, 1) / 2**20:.0f} MiB, oldest at most {mx(burst, 2):.1f} s; "
      f"bound not kept in {sum(r[3] == 'False' for r in burst)} of {len(burst)} samples")
zero = next((r for r in after if r[1] == "0"), None)
last = after[-1] if after else rows[-1]
if zero:
    print(f"after the burst: nothing SSD-only {int(zero[0]) - end} s after it ended; oldest at most {mx(after, 2):.1f} s")
else:
    print(f"after the burst: still {int(last[1]) / 2**20:.0f} MiB SSD-only {int(last[0]) - end} s after it ended (oldest {last[2]} s)")
PY
echo "($dir)"
