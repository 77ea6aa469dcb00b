#!/usr/bin/env bash
# A sequential write stream beside random reads that keep the HDD busy,
# both over data that lives on the HDD, through the daemon on modelled
# drives on the real clock (fio's nbd engine, one connection per job).
# What a user waits for: the stream's write latency and the reads' latency,
# and where the stream's bytes landed (status tiers[].write_landed_bytes).
# A stream on an idle HDD streams; beside queueing reads each of its
# writes waits in their queue (docs/tiering.md, "The SSD write log").
#
#   benchmarks/daemon-stream-beside-reads.sh BINARY_A [BINARY_B]
#
# With two binaries the runs alternate A B B A (both orders). Set-up per
# run: 1 GiB ssd-sata + 8 GiB hdd-5400 models (reserve 256 MiB), 3 GiB
# written sequentially (everything past the first GiB lands on the HDD),
# 10 s idle; then for RUNTIME seconds (default 30): random 4 KiB reads at
# QD READ_QD (default 16) over 512 MiB at 2 GiB, and a sequential stream of
# 64 KiB writes at QD 1 limited to RATE (default 4m per second) from
# 2560 MiB. TIERCTL names tierctl (default beside the first binary).
set -eu
A=${1:?usage: daemon-stream-beside-reads.sh BINARY_A [BINARY_B]}
B=${2:-}
RUNTIME=${RUNTIME:-30}
READ_QD=${READ_QD:-16}
RATE=${RATE:-4m}
PORT=${PORT:-10961}
TIERCTL=${TIERCTL:-$(dirname "$A")/tierctl}
for t in fio nbdinfo python3; do
  command -v $t >/dev/null || { echo "daemon-stream-beside-reads.sh: $t is not installed" >&2; exit 1; }
done
one() { # binary label
  local dir; dir=$(mktemp -d /var/tmp/streamrd.XXXX)
  "$1" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
    --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
    --control "$dir/control.sock" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  kill -0 $pid 2>/dev/null || { echo "tierd exited at start: $(tail -3 "$dir/log")" >&2; exit 1; }
  fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m --iodepth=4 \
    --size=3g --output="$dir/fill.json" --output-format=json >/dev/null
  sleep 10
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/before.json"
  fio --output="$dir/run.json" --output-format=json \
    --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --time_based --runtime="$RUNTIME" \
    --name=reads --rw=randread --bs=4k --iodepth="$READ_QD" --offset=2g --size=512m \
    --name=stream --rw=write --bs=64k --iodepth=1 --offset=2560m --size=512m --rate="$RATE" \
    >/dev/null
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/after.json"
  kill -TERM $pid; wait $pid 2>/dev/null || true
  python3 - "$dir" "$2" <<'PY'
import json, sys
d, label = sys.argv[1], sys.argv[2]
jobs = {j["jobname"]: j for j in json.load(open(f"{d}/run.json"))["jobs"]}
r, w = jobs["reads"]["read"], jobs["stream"]["write"]
b, a = (json.load(open(f"{d}/{n}.json")) for n in ("before", "after"))
landed = {t["tier"]: t["write_landed_bytes"] for t in a["tiers"]}
landed0 = {t["tier"]: t["write_landed_bytes"] for t in b["tiers"]}
ssd = landed["ssd"] - landed0["ssd"]
hdd = landed["hdd"] - landed0["hdd"]
p = lambda x, k: x["clat_ns"]["percentile"].get(k, 0) / 1e6
print(f"{label:10} stream: {w['bw']/1024:5.2f} MiB/s, write mean {w['lat_ns']['mean']/1e6:7.2f} ms, "
      f"p99 {p(w, '99.000000'):7.1f} ms, on flash {ssd/max(ssd+hdd,1):.2f} | "
      f"reads: {r['iops']:5.0f} IOPS, mean {r['lat_ns']['mean']/1e6:6.1f} ms, "
      f"p99 {p(r, '99.000000'):6.0f} ms  ({d})")
PY
  rm -rf "$dir"
}
if [ -n "$B" ]; then
  one "$A" A; one "$B" B; one "$B" B; one "$A" A
else
  one "$A" A
fi
