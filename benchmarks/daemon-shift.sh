#!/usr/bin/env bash
# A working set that moves, through the daemon on modelled drives on the real
# clock, driven over NBD by fio (issue "Placement that follows the user"):
# how soon does a Zipf working set that moved to data on the HDD run at the
# speed it had while it lived on the SSD, and how many bytes did the
# migrator copy for it?
#
#   benchmarks/daemon-shift.sh [--runs N] [--conns N] [--before S] [--after S]
#                              [--set-size MIB] [--read-share PCT]
#                              [--tierd-args "ARGS"] [--json FILE]
#
# Set-up (the issue's): 1 GiB ssd-sata + 8 GiB hdd-5400 models (reserve
# 256 MiB), 6 GiB written sequentially. Region A is 512 MiB (`--set-size`,
# in MiB; the room beside the reserve is 768 MiB) at offset 0, brought to
# the SSD by a pin that is lifted again; region B is as large, at 4 GiB (on
# the HDD). fio: randread 4 KiB, Zipf 0.99, QD 4 on one connection
# (`--conns 4`: four connections at QD 1); `--read-share 70`: randrw with
# 70 % reads (IOPS are reads and writes together). Phases: `ref` reads
# A for --before seconds (default 20): the SSD-resident rate; `shift` reads
# B for --after seconds (default 90); `back` reads A again for --after
# seconds (the set returns, in the other direction). Per second IOPS are
# logged; for `shift` and `back` the report gives the IOPS at 10, 30 and
# 60 s (5 s means) and over the last 10 s (median), the 30 s mean against
# the SSD-resident rate (the `ref` phase's median over its last 10 s), the
# first second at which the 5 s mean reaches 0.9x of it and the first from
# which it stays there, the bytes promoted
# and demoted during the phase against the working set, and the
# share of the phase's region on the SSD at its end.
#
# TIERD and TIERCTL name the binaries (default target/release/…); PORT
# (default 10941) the NBD port.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10941}
RUNS=1 BEFORE=20 AFTER=90 CONNS=1 JSON="" TIERD_ARGS="" SET=512 READS=100
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --tierd-args) TIERD_ARGS=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --set-size) SET=$2; shift 2 ;;
    --read-share) READS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "daemon-shift.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in fio nbdinfo python3; do
  command -v $tool >/dev/null || { echo "daemon-shift.sh: $tool is not installed" >&2; exit 1; }
done
[ -x "$TIERD" ] && [ -x "$TIERCTL" ] || { echo "daemon-shift.sh: build first (cargo build --release)" >&2; exit 1; }
case $SET in ''|*[!0-9]*) echo "daemon-shift.sh: --set-size takes MiB (a whole number)" >&2; exit 2 ;; esac
case $READS in ''|*[!0-9]*) echo "daemon-shift.sh: --read-share takes a percentage" >&2; exit 2 ;; esac
[ "$READS" -le 100 ] || { echo "daemon-shift.sh: --read-share is at most 100" >&2; exit 2; }
RW=(--rw=randread)
[ "$READS" -lt 100 ] && RW=(--rw=randrw --rwmixread="$READS")
QD=4; NJ=1
if [ "$CONNS" -gt 1 ]; then QD=1; NJ=$CONNS; fi
RESULTS=$(mktemp /var/tmp/shift-results.XXXX)

phase() { # dir name offset seconds
  local dir=$1 name=$2 off=$3 secs=$4
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/$name.before.json"
  # The daemon's status once a second during the phase (for the curves of
  # what moved when).
  ( while :; do "$TIERCTL" --control "$dir/control.sock" --json status 2>/dev/null | tr -d '\n' \
      >>"$dir/$name.status.jsonl" && echo >>"$dir/$name.status.jsonl"; sleep 1; done ) &
  local poller=$!
  fio --name="$name" --ioengine=nbd --uri=nbd://127.0.0.1:$PORT "${RW[@]}" --bs=4k \
    --iodepth=$QD --numjobs=$NJ --group_reporting --offset="$off" --size="${SET}m" \
    --random_distribution=zipf:0.99 --time_based --runtime="$secs" \
    --write_iops_log="$dir/$name" --log_avg_msec=1000 \
    --output="$dir/$name.json" --output-format=json >/dev/null
  kill $poller 2>/dev/null; wait $poller 2>/dev/null || true
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/$name.after.json"
}

one() { # label
  local label=$1 dir; dir=$(mktemp -d /var/tmp/shift.XXXX)
  "$TIERD" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
    --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
    --control "$dir/control.sock" $TIERD_ARGS >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  if ! kill -0 $pid 2>/dev/null; then
    echo "daemon-shift.sh: tierd did not start (is port $PORT taken?):" >&2
    grep -v '^ ' "$dir/log" | tail -5 >&2
    rm -rf "$dir"
    exit 1
  fi
  echo "[$label] filling 6 GiB sequentially" >&2
  fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m --iodepth=4 \
    --size=6g --output="$dir/fill.json" --output-format=json >/dev/null
  # Region A onto the SSD (a pin, waited for, then lifted): the working set
  # starts SSD-resident, as in the issue.
  "$TIERCTL" --control "$dir/control.sock" pin "0+${SET}MiB" --tier ssd >/dev/null
  for _ in $(seq 1 120); do
    "$TIERCTL" --control "$dir/control.sock" --json placement "0+${SET}MiB" |
      python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if all(x['where']=='ssd' for x in d['runs']) else 1)" && break
    sleep 1
  done
  "$TIERCTL" --control "$dir/control.sock" unpin "0+${SET}MiB" >/dev/null
  sleep 2
  echo "[$label] region A (SSD-resident) ${BEFORE}s, region B ${AFTER}s, region A again ${AFTER}s" >&2
  phase "$dir" ref 0 "$BEFORE"
  phase "$dir" shift 4g "$AFTER"
  "$TIERCTL" --control "$dir/control.sock" --json placement "4GiB+${SET}MiB" >"$dir/shift.place.json"
  phase "$dir" back 0 "$AFTER"
  "$TIERCTL" --control "$dir/control.sock" --json placement "0+${SET}MiB" >"$dir/back.place.json"
  kill -TERM $pid; wait $pid 2>/dev/null || true
  # The images take 7 GiB; the logs and JSON stay.
  rm -rf "$dir/ssd.img" "$dir/hdd.img" "$dir/meta"
  python3 - "$dir" "$label" "$CONNS" "$SET" >>"$RESULTS" <<'PY'
import glob, json, sys
d, label, conns, set_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def series(name):
    per = {}
    for f in glob.glob(f"{d}/{name}_iops.*.log"):
        for line in open(f):
            t, v = line.split(",")[:2]
            s = int(t) // 1000
            per[s] = per.get(s, 0) + int(v)
    return [per.get(s, 0) for s in range(max(per) + 1)] if per else []
def mean3(xs, t):
    w = xs[max(0, t - 4):t + 1]
    return sum(w) / len(w) if w else 0.0
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0
ref = median(series("ref")[:-1][-10:])
for name in ["shift", "back"]:
    # The last second is partial (fio stops inside it).
    xs = series(name)[:-1]
    b = json.load(open(f"{d}/{name}.before.json"))["migration"]
    a = json.load(open(f"{d}/{name}.after.json"))["migration"]
    up = a["promoted_bytes"] - b["promoted_bytes"]
    down = a["demoted_bytes"] - b["demoted_bytes"]
    runs = json.load(open(f"{d}/{name}.place.json"))["runs"]
    tot = sum(r["len"] for r in runs)
    on_ssd = sum(r["len"] for r in runs if r["where"] == "ssd") / tot if tot else 0.0
    stays = next((t for t in range(len(xs))
                  if all(mean3(xs, u) >= 0.9 * ref for u in range(t, len(xs)))), None)
    reached = next((t for t in range(len(xs)) if mean3(xs, t) >= 0.9 * ref), None)
    reasons = {}
    for r in a["by_reason"]:
        old = next((x for x in b["by_reason"] if x["reason"] == r["reason"]), {"to_ssd": 0, "to_hdd": 0})
        reasons[r["reason"]] = [r["to_ssd"] - old["to_ssd"], r["to_hdd"] - old["to_hdd"]]
    print(json.dumps({
        "run": label, "phase": name, "connections": conns, "set_mib": set_mib, "ssd_resident_iops": round(ref),
        "iops_10s": round(mean3(xs, 10)), "iops_30s": round(mean3(xs, 30)),
        "iops_60s": round(mean3(xs, 60)), "last10_iops": round(median(xs[-10:])),
        "seconds_to_0_9x": reached, "seconds_to_stay_0_9x": stays,
        "ratio_30s": round(mean3(xs, 30) / max(ref, 1.0), 2), "promoted_mib": up >> 20, "demoted_mib": down >> 20,
        "migration_per_working_set": round((up + down) / (set_mib << 20), 2),
        "region_on_ssd": round(on_ssd, 3), "moves_by_reason": reasons, "series": xs, "dir": d,
    }))
PY
}

for r in $(seq 1 "$RUNS"); do one "run$r"; done
python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'run':<5} {'phase':<6} {'conns':>5} {'ref':>7} {'@10s':>7} {'@30s':>7} {'@60s':>7} {'last10':>7} {'@30/ref':>7} {'t0.9x':>6} {'stays':>6} {'up MiB':>7} {'down':>6} {'moved/ws':>8} {'on SSD':>6}")
for r in rows:
    t = "never" if r["seconds_to_0_9x"] is None else f"{r['seconds_to_0_9x']}s"
    st = "never" if r["seconds_to_stay_0_9x"] is None else f"{r['seconds_to_stay_0_9x']}s"
    print(f"{r['run']:<5} {r['phase']:<6} {r['connections']:>5} {r['ssd_resident_iops']:>7} {r['iops_10s']:>7} "
          f"{r['iops_30s']:>7} {r['iops_60s']:>7} {r['last10_iops']:>7} {r['ratio_30s']:>7} {t:>6} {st:>6} "
          f"{r['promoted_mib']:>7} {r['demoted_mib']:>6} {r['migration_per_working_set']:>8} {r['region_on_ssd']:>6}")
PY
if [ -n "$JSON" ]; then cp "$RESULTS" "$JSON"; fi
rm -f "$RESULTS"
