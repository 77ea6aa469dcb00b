#!/usr/bin/env bash
# benchmarks/daemon-drive-rows.sh through a mounted filesystem: the volume
# is exposed by nbdfuse with four connections, attached to a loop device,
# formatted with ext4 and mounted, on modelled drives on the real clock. A
# 1536 MiB filler file is written, then a 512 MiB data file (about a third
# of it lands on the HDD, the rest in the SSD's room); after ten seconds the
# data file is
# read at random (4 KiB, direct I/O, QD 1) for WARM seconds, then an
# Iometer-style workstation row (8 KiB, 80 % reads, 80 % random) runs on it
# for ROW seconds. The loop device uses direct I/O, so the reads reach the
# volume rather than the page cache of the FUSE file behind it.
#
#   [SHARE=0.02] [WARM=20] [ROW=10] benchmarks/daemon-ext4-rows.sh [TIERD_BINARY]
#
# Prints the row's IOPS with the migrator on ("hybrid", SHARE setting the
# hybrid's migrate.promote-share) and off ("frozen": placement stays as the
# writes left it), their ratio, and the hybrid's data file share on the SSD
# before the warm-up and after the row (tierctl placement over its
# extents). Needs root, /dev/fuse and loop devices.
set -euo pipefail
TIERD=${1:-target/release/tierd}
TIERCTL=${TIERCTL:-$(dirname "$TIERD")/tierctl}
PORT=${PORT:-10962}
WARM=${WARM:-20}
ROW=${ROW:-10}
[ "$(id -u)" -eq 0 ] || { echo "daemon-ext4-rows.sh: needs root (loop devices, mount)" >&2; exit 1; }
for tool in nbdfuse losetup mkfs.ext4 filefrag fio python3 fusermount3; do
  command -v $tool >/dev/null || { echo "daemon-ext4-rows.sh: $tool is not installed" >&2; exit 1; }
done

one() { # KIND -> "iops share_before share_after"
  local kind=$1 dir loopdev="" pid="" env=() port=$PORT
  dir=$(mktemp -d /var/tmp/ext4rows.XXXX)
  # Each volume on its own port: a client never reaches another's daemon.
  [ "$kind" = frozen ] && env=(TIERD_MIGRATE__ENABLED=false) && port=$((PORT + 1))
  [ "$kind" = hybrid ] && [ -n "${SHARE:-}" ] && env=(TIERD_MIGRATE__PROMOTE_SHARE=$SHARE)
  env "${env[@]}" "$TIERD" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --reserve 256MiB \
    --ssd-model ssd-sata --hdd-model hdd-5400 --listen 127.0.0.1:$port --metrics-listen "" \
    --control "$dir/control.sock" >"$dir/log" 2>&1 &
  pid=$!
  local CTL="$TIERCTL --control $dir/control.sock"
  for _ in $(seq 1 100); do $CTL status >/dev/null 2>&1 && break; sleep 0.2; done
  kill -0 $pid 2>/dev/null || { echo "tierd did not start:"; tail -3 "$dir/log"; exit 1; } >&2
  mkdir -p "$dir/fuse" "$dir/mnt"
  nbdfuse -C 4 -P "$dir/fuse.pid" "$dir/fuse/disk" nbd://127.0.0.1:$port &
  for _ in $(seq 1 100); do [ -e "$dir/fuse.pid" ] && break; sleep 0.1; done
  # Direct I/O on the loop device: reads must reach the volume, not the
  # page cache of the FUSE file behind the loop device.
  loopdev=$(losetup -f --show --direct-io=on "$dir/fuse/disk")
  mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "$loopdev"
  mount -t ext4 "$loopdev" "$dir/mnt"
  head -c 1536M /dev/zero | tr '\0' 'f' >"$dir/mnt/filler.bin"
  head -c 512M /dev/urandom >"$dir/mnt/data.bin"
  sync
  sleep 10
  share() {
    local tot=0 ssd=0 r t s
    for r in $(filefrag -v -b4096 "$dir/mnt/data.bin" | awk '/^ *[0-9]+:/ { gsub(/\.\./," "); split($0,a,":"); n=split(a[3],p," "); printf "%d+%d\n", p[1]*4096, (p[2]-p[1]+1)*4096 }'); do
      read -r t s < <($CTL --json placement "$r" | python3 -c "
import json,sys; d=json.load(sys.stdin)['runs']
print(sum(x['len'] for x in d), sum(x['len'] for x in d if x['where']=='ssd'))")
      tot=$((tot + t)); ssd=$((ssd + s))
    done
    python3 -c "print(round($ssd / max(1, $tot), 3))"
  }
  local before after iops
  before=$(share)
  echo 3 >/proc/sys/vm/drop_caches
  fio --name=warm --filename="$dir/mnt/data.bin" --rw=randread --bs=4k --direct=1 --iodepth=1 \
    --time_based --runtime=$WARM --output=/dev/null >/dev/null
  fio --name=row --filename="$dir/mnt/data.bin" --rw=randrw --rwmixread=80 --percentage_random=80 \
    --bs=8k --direct=1 --iodepth=1 --time_based --runtime=$ROW \
    --output="$dir/row.json" --output-format=json >/dev/null
  iops=$(python3 -c "import json; j=json.load(open('$dir/row.json'))['jobs'][0]; print(round(j['read']['iops']+j['write']['iops'],1))")
  after=$(share)
  umount "$dir/mnt"; losetup -d "$loopdev"; fusermount3 -u "$dir/fuse" || true
  kill -TERM $pid; wait $pid 2>/dev/null || true
  rm -rf "$dir"
  echo "$iops $before $after"
}

read -r h hb ha < <(one hybrid)
read -r d db da < <(one frozen)
printf '%-10s %10s %10s %8s %14s %14s\n' share hybrid frozen ratio "ssd-share-0" "ssd-share-end"
printf '%-10s %10s %10s %8s %14s %14s\n' "${SHARE:-default}" "$h" "$d" "$(python3 -c "print(round($h/$d,3))")" "$hb" "$ha"
