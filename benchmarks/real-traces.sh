#!/usr/bin/env bash
# Recorded block traces on the bench's executed targets, the grid the
# placement is judged on: every trace x SSD room 1/8, 1/4 and 1/2 of its
# footprint x replay speed 1x and 10x x fill 0.7 and 1.0 (`tierd bench
# --trace`, virtual clock, default drive models). Each (trace, speed, fill)
# is one bench run with the three rooms; its record goes to
# OUT/<trace>-<speed>x-fill<fill>.json, and OUT/tables.md gets one Markdown
# table per run (what docs/tiering.md carries): per room, each target's
# mean and p99 read latency, mean write latency, HDD busy time, read-hit
# share, writes on flash and bytes moved, with the verdicts against the
# best executed cache (and, at fill 1.0, the pure HDD).
#
#   benchmarks/real-traces.sh [--out DIR] [--config FILE] [--speeds "1 10"]
#                             [--fills "0.7 1.0"] [--rooms 0.125,0.25,0.5]
#                             [TRACE...]
#
# TRACEs default to ../shared/traces/*.csv. The HDD is sized per trace: the
# smallest power of two GiB (at least 8) holding four times the footprint,
# so that at fill 0.7 the footprint is a part of a used disk. TIERD names
# the binary (default target/release/tierd).
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
OUT=real-traces CONFIG="" SPEEDS="1 10" FILLS="0.7 1.0" ROOMS=0.125,0.25,0.5
TRACES=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --speeds) SPEEDS=$2; shift 2 ;;
    --fills) FILLS=$2; shift 2 ;;
    --rooms) ROOMS=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "real-traces.sh: unknown argument $1" >&2; exit 2 ;;
    *) TRACES+=("$1"); shift ;;
  esac
done
if [ ${#TRACES[@]} -eq 0 ]; then
  for t in ../shared/traces/*.csv; do [ -e "$t" ] && TRACES+=("$t"); done
fi
[ ${#TRACES[@]} -gt 0 ] || { echo "real-traces.sh: no trace given and none in ../shared/traces" >&2; exit 2; }
[ -x "$TIERD" ] || { echo "real-traces.sh: build first (cargo build --release)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "real-traces.sh: python3 is not installed" >&2; exit 1; }
mkdir -p "$OUT"
CFG=()
[ -n "$CONFIG" ] && CFG=(--config "$CONFIG")

for trace in "${TRACES[@]}"; do
  name=$(basename "${trace%.*}")
  extents=$("$TIERD" trace info --json "$trace" | python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["extents_1m"])')
  gib=8
  while [ $((gib * 1024)) -lt $((4 * extents)) ]; do gib=$((gib * 2)); done
  for speed in $SPEEDS; do
    for fill in $FILLS; do
      out="$OUT/$name-${speed}x-fill$fill.json"
      echo "== $name: ${extents} extents, HDD ${gib} GiB, speed ${speed}x, fill $fill, rooms $ROOMS" >&2
      "$TIERD" bench "${CFG[@]}" --trace "$trace" --trace-room "$ROOMS" --hdd-size "${gib}GiB" \
        --trace-speed "$speed" --fill "$fill" --json --out "$OUT/report-$name-$speed-$fill" >"$out"
    done
  done
done

python3 - "$OUT" >"$OUT/tables.md" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
def ms(us):
    if us is None: return "-"
    return f"{us/1000:.0f}" if us >= 100_000 else f"{us/1000:.1f}" if us >= 1000 else f"{us/1000:.3f}"
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    r = json.load(open(path))
    o = r["options"]
    print(f"### {os.path.basename(path)[:-5]}\n")
    print(f"`tierd bench --trace {os.path.basename(o['traces'][0])} --trace-room {','.join(str(x) for x in o.get('trace_rooms', []))} "
          f"--hdd-size {o['hdd_size'] >> 30}GiB --trace-speed {o.get('trace_speed', 1)} --fill {o.get('fill', 0.7)}`\n")
    print("| room | target | read mean ms | read p99 ms | write mean ms | HDD busy s | read-hit | writes on flash | moved MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in r["points"]:
        d = p.get("trace")
        if not d: continue
        room = p["case"].split("/")[-1]
        rd, wr = d.get("read") or {}, d.get("write") or {}
        t = p["target"] + (" ‡" if p["target"].startswith("cache-") else "")
        print(f"| {room} | {t} | {ms(rd.get('mean_us'))} | {ms(rd.get('p99_us'))} | {ms(wr.get('mean_us'))} | "
              f"{d['hdd_busy_s']:.1f} | {d['read_hit_share']:.3f} | {d['write_ssd_share']:.2f} | {d['moved_bytes'] >> 20} |")
    verdicts = [f for f in r["findings"] if f.get("met") is not None]
    met = sum(1 for f in verdicts if f["met"])
    print(f"\nVerdicts: {met} of {len(verdicts)} met." + ("" if met == len(verdicts) else " Missed: " + ", ".join(
        f"{f['name'].split('/', 1)[1]} {f['value']:.2f} ({'<=' if 'at_most' in f['target'] else '>='} "
        f"{list(f['target'].values())[0]})" for f in verdicts if not f["met"])))
    lru = [f for f in r["findings"] if f["name"].endswith("/lru-read-hit-share")]
    if lru:
        print("Textbook LRU over 1 MiB extents at the hybrid's room (free admission): " + ", ".join(
            f"{f['name'].split('/')[1]} {f['value']:.3f}" for f in lru) + ".")
    print("\n‡ a cache on the same drives: its capacity is the HDD's alone.\n")
EOF
echo "tables: $OUT/tables.md" >&2
