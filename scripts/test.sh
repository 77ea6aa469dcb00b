#!/usr/bin/env bash
# The single "run all tests" command of tierd: installs the real NBD
# clients the system tests drive (Debian/Ubuntu), checks FUSE and loop
# devices, then runs formatting, lints, the build and every test
# (unit + integration, including the real-client interop tests).
set -euo pipefail

cd "$(dirname "$0")/.."

section() {
    printf '\n==== %s ====\n' "$*"
}

die() {
    printf 'ERROR: %s\n' "$*" >&2
    exit 1
}

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
else
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot install packages or use loop devices"
    SUDO=(sudo)
fi

section "Client tools"
# Tools the integration tests run, and the Debian packages providing them
# (rsvg-convert, of librsvg2-bin: bench/tests/charts_png.rs renders the
# bench's charts to PNG; the Ceph daemons and librados2: tests/remote_tier.rs
# starts a one-node cluster with scripts/ceph-single-node.sh for the RADOS
# tier).
TOOLS=(nbdinfo nbdcopy nbdfuse qemu-img qemu-io qemu-nbd fio nbdkit mkfs.ext4 e2fsck losetup fusermount3 mount umount sha256sum openssl rsvg-convert man rados ceph-mon ceph-mgr ceph-osd ceph-authtool)
PACKAGES=(libnbd-bin nbdkit qemu-utils fio fuse3 e2fsprogs util-linux mount coreutils openssl librsvg2-bin man-db ceph-mon ceph-mgr ceph-osd ceph-common librados2)
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
missing=()
for t in "${TOOLS[@]}"; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "missing: ${missing[*]}; installing ${PACKAGES[*]}"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available: install ${PACKAGES[*]} by hand"
    "${SUDO[@]}" apt-get update
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${PACKAGES[@]}"
    for t in "${TOOLS[@]}"; do
        command -v "$t" >/dev/null 2>&1 || die "$t still missing after installing packages"
    done
fi
for t in "${TOOLS[@]}"; do
    printf '  %-12s %s\n' "$t" "$(command -v "$t")"
done

section "FUSE and loop devices"
if [ ! -e /dev/fuse ]; then
    "${SUDO[@]}" modprobe fuse 2>/dev/null || true
fi
[ -e /dev/fuse ] || die "/dev/fuse does not exist (modprobe fuse failed); the nbdfuse/ext4 test needs FUSE"
echo "  /dev/fuse present"
if [ ! -e /dev/loop-control ]; then
    "${SUDO[@]}" modprobe loop 2>/dev/null || true
fi
[ -e /dev/loop-control ] || die "/dev/loop-control does not exist (modprobe loop failed); the ext4 test needs loop devices"
loopdev=$("${SUDO[@]}" losetup -f) || die "no free loop device (losetup -f failed)"
echo "  loop devices available (next free: $loopdev)"
[ "$(id -u)" -eq 0 ] || echo "  note: not root: the mount/loop test will fail; run as root as CI does"

section "Disk space"
# The debug build and its test binaries take about 6 GB of target/; a full
# disk shows up as a linker crash (bus error), so say so up front.
avail_kb=$(df -Pk . | awk 'NR==2 {print $4}')
echo "  $((avail_kb / 1024 / 1024)) GiB free under $(pwd)"
if [ "$avail_kb" -lt $((8 * 1024 * 1024)) ]; then
    echo "  warning: less than 8 GiB free; the build may fail in the linker for want of space"
fi

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

section "cargo build"
cargo build --workspace

section "fuzz targets build (fuzz/, run them with cargo fuzz: docs/reliability.md)"
cargo build --manifest-path fuzz/Cargo.toml --target-dir target/fuzz-build

section "cargo test (unit + integration)"
start=$(date +%s)
cargo test --workspace --no-fail-fast
echo "tests took $(( $(date +%s) - start )) s"

section "interop and mount tests again, the HDD tier on nbdkit over NBD (docs/remote.md)"
TIERD_TEST_REMOTE_HDD=1 cargo test --no-fail-fast --test interop_nbdinfo --test interop_nbdcopy \
  --test interop_qemu --test interop_fio --test mount_ext4

section "All tests passed"
