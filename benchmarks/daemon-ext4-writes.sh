#!/usr/bin/env bash
# Random 4 KiB writes into a file on ext4 whose blocks live on the HDD,
# against the same job into a file whose blocks are pinned to the SSD:
# the write log seen through a mounted filesystem. The daemon runs on
# modelled drives on the real clock; the volume is attached as nbdfuse (4
# connections, libnbd's multi-conn) -> loop device -> ext4 -> mount; fio
# writes with O_DIRECT (libaio, QD 4) so the page cache does not absorb
# the writes. Both orders.
#
#   benchmarks/daemon-ext4-writes.sh [TIERD_BINARY] [LABEL]
#
# Set-up: 1 GiB ssd-sata + 8 GiB hdd-5400 (reserve 256 MiB). File "cold"
# (512 MiB) and file "hot" (256 MiB) are written, then cold's blocks
# (located with filefrag) are pinned to the HDD until `tierctl placement`
# shows them there, and unpinned (a pin to the HDD would bypass the write
# log); hot's blocks are pinned to the SSD. Each job runs
# RUNTIME seconds (default 8). TIERCTL names tierctl. Needs root (loop,
# mount) and nbdfuse, fio, filefrag.
set -eu
BIN=${1:-target/release/tierd}
LABEL=${2:-$(basename "$BIN")}
RUNTIME=${RUNTIME:-8}
PORT=${PORT:-10932}
TIERCTL=${TIERCTL:-target/release/tierctl}

# "OFFSET+LEN" (bytes) of the file's blocks on the volume, one per extent
# of the file (ext4 block size 4096).
ranges() {
  filefrag -v -b4096 "$1" | awk '/^ *[0-9]+:/ { gsub(/\.\./," "); gsub(/:/," ");
    printf "%d+%d\n", $4*4096, $6*4096 }'
}

# Share of the file's blocks on the SSD, from `tierctl placement`.
on_ssd() {
  local ctl=$1 file=$2 tot=0 ssd=0
  while read -r r; do
    set -- $("$TIERCTL" --control "$ctl" --json placement "$r" | python3 -c "
import json,sys; d=json.load(sys.stdin)
print(sum(x['len'] for x in d['runs']), sum(x['len'] for x in d['runs'] if x['where']=='ssd'))")
    tot=$((tot + $1)); ssd=$((ssd + $2))
  done < <(ranges "$file")
  python3 -c "print(f'{$ssd / max($tot, 1):.2f}')"
}

dir="" dev="" pid="" fpid=""
one() { # order
  dir=$(mktemp -d /var/tmp/ext4w.XXXX)
  # Undo the mount stack however the run ends.
  trap 'umount "$dir/mnt" 2>/dev/null; [ -n "${dev:-}" ] && losetup -d "$dev" 2>/dev/null;
    kill ${fpid:-} ${pid:-} 2>/dev/null; true' EXIT
  local ctl=$dir/control.sock
  "$BIN" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
    --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" --control "$ctl" \
    >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  mkdir -p "$dir/fuse" "$dir/mnt"
  nbdfuse -C 4 "$dir/fuse/disk" nbd://127.0.0.1:$PORT >"$dir/nbdfuse.log" 2>&1 &
  fpid=$!
  for _ in $(seq 1 100); do [ -e "$dir/fuse/disk" ] && break; sleep 0.2; done
  dev=$(losetup -f --show "$dir/fuse/disk")
  mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "$dev"
  mount -o noatime "$dev" "$dir/mnt"
  dd if=/dev/urandom of="$dir/mnt/cold" bs=1M count=512 oflag=direct status=none
  dd if=/dev/urandom of="$dir/mnt/hot" bs=1M count=256 oflag=direct status=none
  sync
  while read -r r; do "$TIERCTL" --control "$ctl" pin "$r" --tier hdd >/dev/null; done < <(ranges "$dir/mnt/cold")
  while read -r r; do "$TIERCTL" --control "$ctl" pin "$r" --tier ssd >/dev/null; done < <(ranges "$dir/mnt/hot")
  for _ in $(seq 1 300); do
    [ "$(on_ssd "$ctl" "$dir/mnt/hot")" = "1.00" ] && [ "$(on_ssd "$ctl" "$dir/mnt/cold")" = "0.00" ] && break
    sleep 1
  done
  while read -r r; do "$TIERCTL" --control "$ctl" unpin "$r" >/dev/null; done < <(ranges "$dir/mnt/cold")
  sleep 3
  echo "$LABEL $1: before the jobs, cold $(on_ssd "$ctl" "$dir/mnt/cold") on the SSD, hot $(on_ssd "$ctl" "$dir/mnt/hot")"
  local jobs
  if [ "$1" = cold-first ]; then jobs="cold hot"; else jobs="hot cold"; fi
  for j in $jobs; do
    fio --name=$j --filename="$dir/mnt/$j" --ioengine=libaio --direct=1 --rw=randwrite \
      --bs=4k --iodepth=4 --time_based --runtime="$RUNTIME" \
      --output="$dir/$j.json" --output-format=json >/dev/null
    python3 -c "
import json; d=json.load(open('$dir/$j.json'))['jobs'][0]['write']
print('$LABEL', '$1', '$j-file randwrite-4k qd4', round(d['iops']))" | tee -a "$dir/res"
    "$TIERCTL" --control "$ctl" status 2>/dev/null | grep -E '^(write log|shadows)' | sed 's/^/  /' || true
    sleep 2
  done
  python3 - "$dir/res" <<'PY'
import sys
r = {l.split()[2].split('-')[0]: float(l.split()[-1]) for l in open(sys.argv[1])}
print(f"  ratio cold-file/hot-file: {r['cold'] / r['hot']:.2f}")
PY
  umount "$dir/mnt"
  losetup -d "$dev"
  kill $fpid 2>/dev/null || true; wait $fpid 2>/dev/null || true
  kill -TERM $pid; wait $pid 2>/dev/null || true
  rm -rf "$dir"
}
one cold-first
one hot-first
exit 0
