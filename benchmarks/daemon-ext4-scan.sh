#!/usr/bin/env bash
# A large file read through a filesystem, on the daemon with modelled drives
# on the real clock (issue "Placement that follows the user"): the volume is
# exposed by nbdfuse with four connections, attached to a loop device,
# formatted with ext4 and mounted. A 64 MiB hot file is read at random until
# it lives on the SSD; then a file twice the SSD's size is read once with
# `cat`. The read must count as sequential (libnbd spreads its requests over
# the four connections) and leave the hot file on the SSD.
#
#   benchmarks/daemon-ext4-scan.sh [--json FILE]
#
# Set-up: 512 MiB ssd-sata + 4 GiB hdd-5400 models (reserve 128 MiB), a
# 1 GiB file. The report: sequential bypasses during the scan against the
# reads it took (FUSE reads are at most 128 KiB), the share of the hot
# file's blocks on the SSD before and after (from `filefrag` and `tierctl
# placement`), and the bytes promoted during the scan. Needs root, /dev/fuse
# and loop devices. TIERD and TIERCTL name the binaries; PORT the NBD port.
set -euo pipefail
TIERD=${TIERD:-target/release/tierd}
TIERCTL=${TIERCTL:-target/release/tierctl}
PORT=${PORT:-10961}
JSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "daemon-ext4-scan.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "daemon-ext4-scan.sh: needs root (loop devices, mount)" >&2; exit 1; }
for tool in nbdfuse losetup mkfs.ext4 filefrag fio python3 fusermount3; do
  command -v $tool >/dev/null || { echo "daemon-ext4-scan.sh: $tool is not installed" >&2; exit 1; }
done
dir=$(mktemp -d /var/tmp/ext4scan.XXXX)
loopdev="" pid="" fusepid=""
cleanup() {
  umount "$dir/mnt" 2>/dev/null || true
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
  fusermount3 -u "$dir/fuse" 2>/dev/null || true
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$dir/ssd.img" "$dir/hdd.img" "$dir/meta"
}
trap cleanup EXIT
CTL="$TIERCTL --control $dir/control.sock"
"$TIERD" serve --data-dir "$dir" --ssd-size 512MiB --hdd-size 4GiB --ssd-model ssd-sata \
  --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
  --control "$dir/control.sock" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do $CTL status >/dev/null 2>&1 && break; sleep 0.2; done
kill -0 $pid 2>/dev/null || { echo "tierd did not start:"; tail -5 "$dir/log"; exit 1; } >&2
mkdir -p "$dir/fuse" "$dir/mnt"
nbdfuse -C 4 -P "$dir/fuse.pid" "$dir/fuse/disk" nbd://127.0.0.1:$PORT &
for _ in $(seq 1 100); do [ -e "$dir/fuse.pid" ] && break; sleep 0.1; done
loopdev=$(losetup -f --show "$dir/fuse/disk")
echo "[ext4-scan] mkfs and files (64 MiB hot, 1 GiB cold)" >&2
mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "$loopdev"
mount -t ext4 "$loopdev" "$dir/mnt"
head -c 64M /dev/urandom >"$dir/mnt/hot.bin"
head -c 1G /dev/zero | tr '\0' 'x' >"$dir/mnt/big.bin"
sync
# Byte ranges of a file on the volume (ext4 blocks of 4 KiB, loop at 0).
ranges() {
  filefrag -v -b4096 "$1" | awk '/^ *[0-9]+:/ { gsub(/\.\./," "); split($0,a,":"); n=split(a[3],p," "); printf "%d+%d\n", p[1]*4096, (p[2]-p[1]+1)*4096 }'
}
share() { # file: share of its bytes on the SSD
  local tot=0 ssd=0
  for r in $(ranges "$1"); do
    read -r t s < <($CTL --json placement "$r" | python3 -c "
import json,sys; d=json.load(sys.stdin)['runs']
print(sum(x['len'] for x in d), sum(x['len'] for x in d if x['where']=='ssd'))")
    tot=$((tot + t)); ssd=$((ssd + s))
  done
  python3 -c "print(round($ssd / max(1, $tot), 3))"
}
echo "[ext4-scan] heating the hot file (random reads, 25 s)" >&2
echo 3 >/proc/sys/vm/drop_caches
fio --name=hot --filename="$dir/mnt/hot.bin" --rw=randread --bs=4k --direct=1 --iodepth=1 \
  --time_based --runtime=25 --output="$dir/hot.json" --output-format=json >/dev/null
sleep 3
hot_before=$(share "$dir/mnt/hot.bin")
st() { $CTL --json status | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['sequential_bypasses'], d['migration']['promoted_bytes'])"; }
read -r b0 p0 < <(st)
echo "[ext4-scan] reading the 1 GiB file with cat" >&2
echo 3 >/proc/sys/vm/drop_caches
t0=$(date +%s.%N)
cat "$dir/mnt/big.bin" >/dev/null
t1=$(date +%s.%N)
# Keep the hot set in use while the migrator has a few rounds to react.
fio --name=hot2 --filename="$dir/mnt/hot.bin" --rw=randread --bs=4k --direct=1 --iodepth=1 \
  --time_based --runtime=5 --output="$dir/hot2.json" --output-format=json >/dev/null
read -r b1 p1 < <(st)
hot_after=$(share "$dir/mnt/hot.bin")
python3 - "$b0" "$b1" "$p0" "$p1" "$hot_before" "$hot_after" "$t0" "$t1" "$JSON" <<'PY'
import json, sys
b0, b1, p0, p1 = map(int, sys.argv[1:5])
hb, ha, t0, t1 = map(float, sys.argv[5:9])
out = {"bypasses_during_scan": b1 - b0, "scan_reads_at_128k": (1 << 30) // (128 << 10),
       "promoted_mib_during_scan": (p1 - p0) >> 20, "hot_on_ssd_before": hb,
       "hot_on_ssd_after": ha, "scan_secs": round(t1 - t0, 1),
       "scan_mib_per_s": round(1024 / max(t1 - t0, 1e-9), 1)}
print(json.dumps(out, indent=1))
if sys.argv[9]:
    open(sys.argv[9], "w").write(json.dumps(out) + "\n")
PY
