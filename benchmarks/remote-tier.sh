#!/usr/bin/env bash
# The capacity tier on a remote NBD export (docs/remote.md), through the
# daemon on the real clock: a local SSD in front of a remote 1 ms away
# against the remote alone, on a Zipf hot set, once warm.
#
#   benchmarks/remote-tier.sh [--rtt 1ms] [--warm S] [--measure S]
#                             [--ssd-model MODEL] [--order hybrid-first|remote-first]
#                             [--json FILE]
#
# The remote: nbdkit's file plugin on 127.0.0.1 over a 4 GiB sparse image,
# with its delay filter holding every read and write for --rtt (default
# 1ms: the round trip of a network disk). The hybrid: tierd with a 1 GiB
# local SSD image (optionally timed like --ssd-model) and `hdd =
# nbd://127.0.0.1:RPORT`, 2 GiB written into it sequentially first (so the
# region read lies on the remote). The region: 512 MiB at 1536 MiB; fio
# randread 4 KiB, Zipf 0.99, through fio's nbd engine. The hybrid is read
# for --warm seconds (default 120; per-second IOPS reported at 10 s, 30 s and
# the last 10 s; 120 s is enough for the set to settle on the SSD here),
# then each client shape is measured for --measure seconds
# (default 20) on the hybrid and on the remote alone (the same nbdkit,
# straight): one connection at QD 1, four connections at QD 1, one at QD 8;
# each row gives the IOPS ratio, the median latencies and their ratio, and
# the bytes the migrator moved during the row.
# `--order remote-first` measures the remote before the hybrid's warm-up.
#
# TIERD and TIERCTL name the binaries (default target/release/…); PORT and
# RPORT (default 10951, 10952) the NBD ports.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10951}
RPORT=${RPORT:-10952}
RTT=1ms WARM=120 MEASURE=20 SSD_MODEL="" ORDER=hybrid-first JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --rtt) RTT=$2; shift 2 ;;
    --warm) WARM=$2; shift 2 ;;
    --measure) MEASURE=$2; shift 2 ;;
    --ssd-model) SSD_MODEL=$2; shift 2 ;;
    --order) ORDER=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "remote-tier.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $ORDER in hybrid-first|remote-first) ;; *) echo "remote-tier.sh: --order hybrid-first or remote-first" >&2; exit 2 ;; esac
for tool in fio nbdkit nbdinfo python3; do
  command -v $tool >/dev/null || { echo "remote-tier.sh: $tool is not installed" >&2; exit 1; }
done
[ -x "$TIERD" ] && [ -x "$TIERCTL" ] || { echo "remote-tier.sh: build first (cargo build --release)" >&2; exit 1; }

DIR=$(mktemp -d /var/tmp/remote-tier.XXXX)
NBDKIT_PID="" TIERD_PID=""
cleanup() {
  [ -n "$TIERD_PID" ] && kill -TERM "$TIERD_PID" 2>/dev/null && wait "$TIERD_PID" 2>/dev/null
  [ -n "$NBDKIT_PID" ] && kill "$NBDKIT_PID" 2>/dev/null && wait "$NBDKIT_PID" 2>/dev/null
  rm -f "$DIR/remote.img" "$DIR/ssd.img"
  true
}
trap cleanup EXIT

truncate -s 4G "$DIR/remote.img"
truncate -s 1G "$DIR/ssd.img"
nbdkit --foreground -i 127.0.0.1 -p "$RPORT" --filter=delay file "$DIR/remote.img" \
  delay-read="$RTT" delay-write="$RTT" >"$DIR/nbdkit.log" 2>&1 &
NBDKIT_PID=$!
for _ in $(seq 1 50); do nbdinfo "nbd://127.0.0.1:$RPORT" >/dev/null 2>&1 && break; sleep 0.2; done
kill -0 "$NBDKIT_PID" 2>/dev/null || { echo "remote-tier.sh: nbdkit did not start (port $RPORT taken?)" >&2; cat "$DIR/nbdkit.log" >&2; exit 1; }

MODEL_ARGS=()
[ -n "$SSD_MODEL" ] && MODEL_ARGS=(--ssd-model "$SSD_MODEL")
"$TIERD" format --ssd "$DIR/ssd.img" --hdd "nbd://127.0.0.1:$RPORT" --meta-dir "$DIR/meta" \
  --data-dir "$DIR" --reserve 256MiB >"$DIR/format.log" 2>&1
"$TIERD" serve --ssd "$DIR/ssd.img" --hdd "nbd://127.0.0.1:$RPORT" --meta-dir "$DIR/meta" \
  --data-dir "$DIR" --listen 127.0.0.1:$PORT --metrics-listen "" --control "$DIR/control.sock" \
  "${MODEL_ARGS[@]}" >"$DIR/tierd.log" 2>&1 &
TIERD_PID=$!
for _ in $(seq 1 100); do nbdinfo "nbd://127.0.0.1:$PORT" >/dev/null 2>&1 && break; sleep 0.2; done
kill -0 "$TIERD_PID" 2>/dev/null || { echo "remote-tier.sh: tierd did not start:" >&2; tail -5 "$DIR/tierd.log" >&2; exit 1; }

fiorun() { # name uri qd jobs seconds
  fio --name="$1" --ioengine=nbd --uri="$2" --rw=randread --bs=4k --iodepth="$3" \
    --numjobs="$4" --group_reporting --offset=1536m --size=512m \
    --random_distribution=zipf:0.99 --time_based --runtime="$5" \
    --write_iops_log="$DIR/$1" --log_avg_msec=1000 \
    --output="$DIR/$1.json" --output-format=json >/dev/null
}
SHAPES=("qd1 1 1" "conns4 1 4" "qd8 8 1")
remote_alone() {
  for s in "${SHAPES[@]}"; do
    set -- $s
    echo "remote alone: $1, ${MEASURE}s" >&2
    fiorun "remote-$1" "nbd://127.0.0.1:$RPORT" "$2" "$3" "$MEASURE"
  done
}

echo "filling 2 GiB through tierd (the read region ends up on the remote)" >&2
fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=1m --iodepth=8 \
  --size=2g --output="$DIR/fill.json" --output-format=json >/dev/null
# The fill's dirty pages reach the disk now, not during the measurements.
sync
"$TIERCTL" --control "$DIR/control.sock" --json placement 1536MiB+512MiB >"$DIR/place.before.json"
[ "$ORDER" = remote-first ] && remote_alone
"$TIERCTL" --control "$DIR/control.sock" --json status >"$DIR/status.before.json"
echo "hybrid: warming ${WARM}s (QD 1)" >&2
fiorun warm "nbd://127.0.0.1:$PORT" 1 1 "$WARM"
"$TIERCTL" --control "$DIR/control.sock" --json status >"$DIR/status.warm.json"
for s in "${SHAPES[@]}"; do
  set -- $s
  echo "hybrid: $1, ${MEASURE}s" >&2
  "$TIERCTL" --control "$DIR/control.sock" --json status >"$DIR/status.before-$1.json"
  fiorun "hybrid-$1" "nbd://127.0.0.1:$PORT" "$2" "$3" "$MEASURE"
  "$TIERCTL" --control "$DIR/control.sock" --json status >"$DIR/status.after-$1.json"
done
"$TIERCTL" --control "$DIR/control.sock" --json placement 1536MiB+512MiB >"$DIR/place.after.json"
[ "$ORDER" = hybrid-first ] && remote_alone

python3 - "$DIR" "$RTT" "$SSD_MODEL" "$ORDER" "$JSON" <<'PY'
import glob, json, sys
d, rtt, model, order, out = sys.argv[1:6]
def iops(name):
    j = json.load(open(f"{d}/{name}.json"))
    return j["jobs"][0]["read"]["iops"]
def series(name):
    per = {}
    for f in glob.glob(f"{d}/{name}_iops.*.log"):
        for line in open(f):
            t, v = line.split(",")[:2]
            per[int(t) // 1000] = per.get(int(t) // 1000, 0) + int(v)
    return [per.get(s, 0) for s in range(max(per) + 1)][:-1] if per else []
def on_ssd(f):
    runs = json.load(open(f"{d}/{f}"))["runs"]
    tot = sum(r["len"] for r in runs)
    return sum(r["len"] for r in runs if r["where"] == "ssd") / tot if tot else 0.0
w = series("warm")
mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
b = json.load(open(f"{d}/status.before.json"))["migration"]
a = json.load(open(f"{d}/status.warm.json"))["migration"]
rec = {"rtt": rtt, "ssd_model": model or None, "order": order,
       "region_on_ssd_before": round(on_ssd("place.before.json"), 3),
       "region_on_ssd_after": round(on_ssd("place.after.json"), 3),
       "warm_iops_10s": round(mean(w[6:11])), "warm_iops_30s": round(mean(w[26:31])),
       "warm_iops_last10": round(mean(w[-10:])),
       "warm_promoted_mib": (a["promoted_bytes"] - b["promoted_bytes"]) >> 20,
       "rows": []}
print(f"remote {rtt} round trip; SSD {model or 'image file (page cache)'}; order {order}")
print(f"region on the SSD: {rec['region_on_ssd_before']} before, {rec['region_on_ssd_after']} after; "
      f"warm-up QD 1: {rec['warm_iops_10s']} IOPS @10s, {rec['warm_iops_30s']} @30s, "
      f"{rec['warm_iops_last10']} last 10 s; promoted {rec['warm_promoted_mib']} MiB")
def lat(name):
    j = json.load(open(f"{d}/{name}.json"))["jobs"][0]["read"]["clat_ns"]
    return j["percentile"]["50.000000"] / 1000, j["mean"] / 1000
def moved(shape):
    b = json.load(open(f"{d}/status.before-{shape}.json"))["migration"]
    a = json.load(open(f"{d}/status.after-{shape}.json"))["migration"]
    return (a["promoted_bytes"] - b["promoted_bytes"] + a["demoted_bytes"] - b["demoted_bytes"]) >> 20
print(f"{'client':<8} {'hybrid':>9} {'remote':>9} {'ratio':>7} {'p50 us hyb/rem':>16} {'p50 ratio':>9} {'moved MiB':>9}")
for shape in ["qd1", "conns4", "qd8"]:
    h, r = iops(f"hybrid-{shape}"), iops(f"remote-{shape}")
    (hp, _), (rp, _) = lat(f"hybrid-{shape}"), lat(f"remote-{shape}")
    m = moved(shape)
    rec["rows"].append({"client": shape, "hybrid_iops": round(h), "remote_iops": round(r), "ratio": round(h / r, 1),
                        "hybrid_p50_us": round(hp, 1), "remote_p50_us": round(rp, 1), "p50_ratio": round(rp / hp, 1),
                        "moved_during_mib": m})
    print(f"{shape:<8} {h:>9.0f} {r:>9.0f} {h / r:>6.1f}x {hp:>7.0f}/{rp:<8.0f} {rp / hp:>8.1f}x {m:>9}")
if out:
    json.dump(rec, open(out, "w"), indent=1)
print(f"logs: {d}")
PY
