#!/usr/bin/env bash
# A block trace replayed through the daemon on modelled drives on the real
# clock, over NBD by fio (its nbd engine replaying an iolog made by `tierd
# trace export`): the check of `tierd bench --trace` (virtual time) through
# the real data path. Reports the daemon's SSD read-hit share and the share
# of writes that landed on flash over the replay (from tierctl status:
# tierd_read_hit_bytes and tierd_write_landed_bytes by tier), the bytes the
# migrator moved, fio's latencies, and what admission at the miss did
# (tierctl status's admission object, counts since start).
#
#   benchmarks/daemon-trace.sh TRACE [--ssd-size SIZE] [--hdd-size SIZE]
#                              [--speed X] [--tierd-args "ARGS"]
#
# The trace (any format tierd reads) is laid into the volume as the bench
# does: its touched 1 MiB extents packed in order from the first extent on
# the HDD, after the whole volume was written once (the used state), so its
# data starts on the HDD. --speed replays X times faster (fio's
# replay_time_scale). Defaults: 1 GiB ssd-sata + 8 GiB hdd-5400, speed 1.
# TIERD and TIERCTL name the binaries (default target/release/…); PORT
# (default 10951) the NBD port.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10951}
SSD=1GiB HDD=8GiB SPEED=1 TIERD_ARGS="" TRACE=""
while [ $# -gt 0 ]; do
  case $1 in
    --ssd-size) SSD=$2; shift 2 ;;
    --hdd-size) HDD=$2; shift 2 ;;
    --speed) SPEED=$2; shift 2 ;;
    --tierd-args) TIERD_ARGS=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "daemon-trace.sh: unknown argument $1" >&2; exit 2 ;;
    *) TRACE=$1; shift ;;
  esac
done
[ -n "$TRACE" ] || { echo "daemon-trace.sh: name a trace (see --help)" >&2; exit 2; }
for tool in fio jq python3; do
  command -v $tool >/dev/null || { echo "daemon-trace.sh: $tool is not installed" >&2; exit 1; }
done
[ -x "$TIERD" ] && [ -x "$TIERCTL" ] || { echo "daemon-trace.sh: build first (cargo build --release)" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/daemon-trace.XXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
DATA=$WORK/data
# shellcheck disable=SC2086 # TIERD_ARGS is a list of arguments
"$TIERD" serve --data-dir "$DATA" --ssd-size "$SSD" --hdd-size "$HDD" \
  --ssd-model ssd-sata --hdd-model hdd-5400 --listen "127.0.0.1:$PORT" \
  --metrics-listen "" $TIERD_ARGS >"$WORK/tierd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  grep -q "serving NBD over TCP" "$WORK/tierd.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$WORK/tierd.log" >&2; exit 1; }
  sleep 0.1
done
CTL=("$TIERCTL" --control "$DATA/control.sock" --json)
status() { "${CTL[@]}" status; }
SIZE=$(status | jq '.capacity_bytes')
# The used state: every extent written once, in order, while the migrator
# waits (it restores the reserve after).
echo "== writing the whole volume once ($((SIZE >> 20)) MiB)" >&2
"${CTL[@]}" migrate pause >/dev/null
fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=1m \
  --iodepth=8 --size="$SIZE" --output="$WORK/fill.txt" >/dev/null
"${CTL[@]}" migrate resume >/dev/null
for _ in $(seq 600); do
  free=$(status | jq '.reserve.ssd_free_bytes')
  target=$(status | jq '.reserve.target_bytes')
  [ "$free" -ge "$target" ] && break
  sleep 1
done
# Lay the trace into the HDD part: its touched extents packed, in order,
# onto the extents the placement shows on the HDD (as `tierd bench --trace`
# lays them from the first HDD extent on), so every block starts there.
"${CTL[@]}" placement | jq -c '[.runs[] | select(.where == "hdd") | [.offset, .len]]' >"$WORK/hdd-runs.json"
"$TIERD" trace import "$TRACE" "$WORK/in.trace" >/dev/null 2>&1 || cp "$TRACE" "$WORK/in.trace"
python3 - "$WORK/in.trace" "$WORK/laid.trace" "$WORK/hdd-runs.json" <<'EOF'
import json, struct, sys
src, dst, runs = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
E = 1 << 20
slots = [o + i * E for o, n in runs for i in range(n // E)]
data = open(src, "rb").read()
hlen = struct.unpack_from("<H", data, 10)[0]
head, body = data[:hlen], data[hlen:]
recs = [list(struct.unpack_from("<QQIHBB", body, i)) for i in range(0, len(body), 24)]
touched = sorted({e for r in recs if r[4] != 4 for e in range(r[1] // E, (r[1] + max(r[2], 1) - 1) // E + 1)})
if len(touched) > len(slots):
    sys.exit(f"daemon-trace.sh: the trace touches {len(touched)} extents, the HDD holds {len(slots)}: give a bigger --hdd-size")
index = {e: slots[i] for i, e in enumerate(touched)}
with open(dst, "wb") as f:
    f.write(head)
    for r in recs:
        if r[4] != 4:
            r[1] = index[r[1] // E] + r[1] % E
        f.write(struct.pack("<QQIHBB", *r))
print(f"{len(recs)} requests, {len(touched)} extents laid onto HDD extents", file=sys.stderr)
EOF
"$TIERD" trace export "$WORK/laid.trace" "$WORK/replay.iolog" --to fio-iolog --device nbd >/dev/null 2>&1
before=$(status)
echo "== replaying through the daemon (speed ${SPEED}x)" >&2
fio --name=replay --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" \
  --read_iolog="$WORK/replay.iolog" --replay_time_scale="$(python3 -c "print(max(1, round(100 * $SPEED)))")" \
  --iodepth=16 --output-format=json --output="$WORK/replay.json" >/dev/null
after=$(status)
jq -n --argjson b "$before" --argjson a "$after" --slurpfile f "$WORK/replay.json" '
  def tier($s; $t): $s.tiers[] | select(.tier == $t);
  def d($k; $t): (tier($a; $t)[$k] // 0) - (tier($b; $t)[$k] // 0);
  (d("read_hit_bytes"; "ssd")) as $rs | (d("read_hit_bytes"; "hdd")) as $rh
  | (d("write_landed_bytes"; "ssd")) as $ws | (d("write_landed_bytes"; "hdd")) as $wh
  | ($a.migration.promoted_bytes - $b.migration.promoted_bytes) as $up
  | ($a.migration.demoted_bytes - $b.migration.demoted_bytes) as $down
  | $f[0].jobs[0] as $j
  | {
      ssd_read_hit_share: (if $rs + $rh > 0 then $rs / ($rs + $rh) else null end),
      read_mib: (($rs + $rh) / 1048576 | floor),
      write_ssd_share: (if $ws + $wh > 0 then $ws / ($ws + $wh) else null end),
      promoted_mib: ($up / 1048576 | floor), demoted_mib: ($down / 1048576 | floor),
      reads: $j.read.total_ios, writes: $j.write.total_ios,
      read_lat_mean_us: ($j.read.clat_ns.mean / 1000 | floor),
      read_lat_p99_us: (($j.read.clat_ns.percentile["99.000000"] // 0) / 1000 | floor),
      write_lat_mean_us: ($j.write.clat_ns.mean / 1000 | floor),
      admission: $a.admission
    }'
