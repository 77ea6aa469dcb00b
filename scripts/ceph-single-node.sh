#!/usr/bin/env bash
# ceph-single-node.sh - a throwaway one-node Ceph cluster for tests.
#
# Usage:
#   scripts/ceph-single-node.sh start DIR   # create (or restart) the cluster in DIR
#   scripts/ceph-single-node.sh stop DIR    # stop its daemons (DIR is kept)
#
# What `start` does, on 127.0.0.1 only and entirely inside DIR:
#   * installs the Ceph packages with apt-get if the commands are missing
#     (ceph-mon ceph-mgr ceph-osd ceph-common librados-dev; needs root);
#   * writes DIR/ceph.conf (random fsid) and DIR/ceph.client.admin.keyring;
#   * creates and starts one monitor (mon.a), one manager (mgr.x) and one
#     OSD (osd.0). The OSD uses BlueStore on a sparse plain file,
#     DIR/osd0/block (CEPH_OSD_SIZE_GB GiB, default 6): no LVM, no
#     ceph-volume, no block device;
#   * creates the replicated pool `tierd` with size 1 / min_size 1;
#   * waits (up to CEPH_START_TIMEOUT seconds, default 120) until a small
#     object can be written to and read back from that pool with `rados`.
# Mon, mgr and OSD data, logs (DIR/log), admin sockets and pid files
# (DIR/run) all live under DIR; /etc/ceph and /var/lib/ceph are not used.
# Running `start` again on a DIR that already holds a cluster just starts
# its daemons again; a DIR that holds anything else is refused.
#
# Authentication: cephx. Keys are generated with ceph-authtool; the
# client.admin key is in DIR/ceph.client.admin.keyring, which DIR/ceph.conf
# names, so a client needs only `-c DIR/ceph.conf` (user client.admin,
# the default): e.g. `rados -c DIR/ceph.conf -p tierd ls`.
#
# The monitor listens on 127.0.0.1:$CEPH_MON_PORT (default 6789) with the
# v1 (legacy) messenger protocol; the mgr and OSD pick free ports in
# 6800-7300 themselves, so several clusters can run at once if each gets
# its own DIR and CEPH_MON_PORT.
#
# Needs: Debian/Ubuntu with apt (Ceph 16 "Pacific" on Debian 12), root
# (for apt-get; the daemons run as the invoking user), ~1.5 GiB of RAM,
# a few GiB of disk under DIR (the block file is sparse), and a file
# system that supports O_DIRECT (ext4, xfs; not tmpfs).
#
# Progress goes to stderr. On failure the script prints the tail of the
# relevant daemon log, stops whatever it started, and exits non-zero.
#
# `stop` sends SIGTERM to the daemons listed in DIR/run/*.pid (and any
# other process still running with DIR/ceph.conf), waits for them to exit
# (SIGKILL after 30 s), and leaves DIR in place.

set -euo pipefail

PROG=$(basename "$0")
POOL=tierd
MON_ID=a
MGR_ID=x
OSD_SIZE_GB=${CEPH_OSD_SIZE_GB:-6}
START_TIMEOUT=${CEPH_START_TIMEOUT:-120}
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { printf '[%s %s] %s\n' "$PROG" "$(date +%H:%M:%S)" "$*" >&2; }

usage() {
    echo "usage: $PROG start|stop DIR   (env: CEPH_MON_PORT, CEPH_OSD_SIZE_GB, CEPH_START_TIMEOUT)" >&2
    exit 2
}

# The log to show when something fails; set before each step.
CURRENT_LOG=""
STARTED_DAEMONS=0

die() {
    log "ERROR: $*"
    if [ -n "$CURRENT_LOG" ] && [ -f "$CURRENT_LOG" ]; then
        log "last lines of $CURRENT_LOG:"
        tail -n 40 "$CURRENT_LOG" >&2 || true
    fi
    if [ "$STARTED_DAEMONS" = 1 ] && [ "${CEPH_KEEP_ON_FAILURE:-0}" != 1 ]; then
        log "stopping the daemons started so far (set CEPH_KEEP_ON_FAILURE=1 to keep them)"
        stop_cluster || true
    fi
    log "FAILED: $*"
    exit 1
}

# --------------------------------------------------------------------------
# stop
# --------------------------------------------------------------------------

# pids of processes whose command line names DIR/ceph.conf (our daemons).
pids_using_conf() {
    local p cmd
    for p in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
        case "$cmd" in
            ceph-mon\ *"$CONF "* | ceph-mgr\ *"$CONF "* | ceph-osd\ *"$CONF "* | \
            */ceph-mon\ *"$CONF "* | */ceph-mgr\ *"$CONF "* | */ceph-osd\ *"$CONF "*)
                echo "${p#/proc/}" ;;
        esac
    done
}

# pid of daemon NAME (osd.0, mgr.x, mon.a) of this cluster, from its pid
# file, or else by its command line; empty if it is not running.
daemon_pid() {
    local name=$1 p type=${1%%.*} id=${1#*.}
    p=$(cat "$RUN/$name.pid" 2>/dev/null || true)
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null &&
        tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$CONF"; then
        echo "$p"
        return 0
    fi
    for p in $(pids_using_conf); do
        case "$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" in
            *"ceph-$type "*" -i $id "*) echo "$p"; return 0 ;;
        esac
    done
}

# SIGTERM the given pids and wait for them to exit (SIGKILL after 30 s).
kill_and_wait() {
    local p alive deadline=$((SECONDS + 30))
    [ $# -gt 0 ] || return 0
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    while :; do
        alive=()
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        [ "${#alive[@]}" -eq 0 ] && return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "still running after 30 s, sending SIGKILL to ${alive[*]}"
            for p in "${alive[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
            deadline=$((SECONDS + 10))
        fi
        sleep 0.2
    done
}

stop_cluster() {
    local osd p rest=()
    osd=$(daemon_pid osd.0)
    p=$(daemon_pid "mgr.$MGR_ID") && [ -n "$p" ] && rest+=("$p")
    p=$(daemon_pid "mon.$MON_ID") && [ -n "$p" ] && rest+=("$p")
    for p in $(pids_using_conf); do
        case " $osd ${rest[*]:-} " in *" $p "*) ;; *) rest+=("$p") ;; esac
    done
    if [ -z "$osd" ] && [ "${#rest[@]}" -eq 0 ]; then
        log "no daemons running for $DIR"
    else
        # The OSD first, while the mon can still take its "marking myself
        # down" message (else it waits osd_mon_shutdown_timeout), then the rest.
        if [ -n "$osd" ]; then
            log "stopping osd.0 (pid $osd)"
            kill_and_wait "$osd"
        fi
        if [ "${#rest[@]}" -gt 0 ]; then
            log "stopping mgr/mon (pids ${rest[*]})"
            kill_and_wait "${rest[@]}"
        fi
        log "all daemons of $DIR stopped"
    fi
    rm -f "$RUN"/*.pid "$RUN"/*.asok 2>/dev/null || true
}

# --------------------------------------------------------------------------
# start
# --------------------------------------------------------------------------

install_packages() {
    local missing=() c
    for c in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool rados; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if ! dpkg -s librados-dev >/dev/null 2>&1; then missing+=(librados-dev); fi
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    log "missing: ${missing[*]}; installing Ceph packages with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ceph-mon ceph-mgr ceph-osd ceph-common librados-dev by hand"
    [ "$(id -u)" -eq 0 ] || die "not root: cannot apt-get install ceph-mon ceph-mgr ceph-osd ceph-common librados-dev"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 || die "apt-get update failed"
    apt-get install -y -q ceph-mon ceph-mgr ceph-osd ceph-common librados-dev >&2 ||
        die "apt-get install failed"
}

# ceph CLI against our cluster, never hanging for long.
cephcli() {
    timeout 60 ceph -c "$CONF" --connect-timeout 30 "$@"
}

# Runs a ceph command; on failure dies showing its output.
ceph_or_die() {
    local out
    out=$(cephcli "$@" 2>&1) || die "'ceph $*' failed: $out"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

write_conf() {
    local fsid=$1 port=$2
    cat >"$CONF" <<EOF
# Throwaway single-node test cluster made by $PROG; everything under $DIR.
[global]
fsid = $fsid
mon_host = v1:127.0.0.1:$port
public_addr = 127.0.0.1
public_network = 127.0.0.1/32
cluster_network = 127.0.0.1/32
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = $RUN
crash_dir = $DIR/crash
# one OSD: pools of size 1, no host-level failure domain
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_msgr2_not_enabled = false
# the host disk may be fairly full; don't warn, and never shut the mon down
mon_data_avail_warn = 2
mon_data_avail_crit = 1
# the mgr enables only iostat besides its always-on modules (no
# dashboard, restful or nfs)
mgr_initial_modules = iostat

[client]
keyring = $DIR/ceph.client.admin.keyring

[mon]
mon_data = $DIR/mon
keyring = $DIR/mon/keyring
log_file = $DIR/log/\$cluster-\$name.log
pid_file = $RUN/\$name.pid
admin_socket = $RUN/\$cluster-\$name.asok
mon_cluster_log_file = $DIR/log/\$cluster.log
mon_memory_target = 536870912
mon_osd_down_out_interval = 0
mon_warn_on_osd_down_out_interval_zero = false

[mgr]
mgr_data = $DIR/mgr
keyring = $DIR/mgr/keyring
log_file = $DIR/log/\$cluster-\$name.log
pid_file = $RUN/\$name.pid
admin_socket = $RUN/\$cluster-\$name.asok

[osd]
osd_data = $DIR/osd0
keyring = $DIR/osd0/keyring
log_file = $DIR/log/\$cluster-\$name.log
pid_file = $RUN/\$name.pid
admin_socket = $RUN/\$cluster-\$name.asok
osd_objectstore = bluestore
# BlueStore's block "device" is the plain file \$osd_data/block, created
# sparse at mkfs. (bluestore_block_path stays unset: pointing it at
# \$osd_data/block makes BlueStore symlink the file to itself, ELOOP.)
bluestore_block_create = true
bluestore_block_size = $((OSD_SIZE_GB * 1024 * 1024 * 1024))
bluestore_block_db_create = false
bluestore_block_wal_create = false
# small memory footprint for a test VM
osd_memory_target = 805306368
bluestore_cache_autotune = false
bluestore_cache_size = 134217728
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 1
EOF
}

start_daemon() { # name logfile cmd...
    local name=$1 logf=$2
    shift 2
    CURRENT_LOG=$logf
    log "starting $name"
    STARTED_DAEMONS=1
    # The daemons fork into the background themselves once initialised
    # and write their pid file; a non-zero exit here means init failed.
    "$@" >>"$DIR/log/$name.stderr" 2>&1 || {
        cat "$DIR/log/$name.stderr" >&2 || true
        die "$name failed to start"
    }
}

# Fails (die) if the daemon's pid file is missing or its process is gone.
check_alive() { # name logfile
    local f="$RUN/$1.pid" p
    p=$(cat "$f" 2>/dev/null || true)
    if [ -z "$p" ] || ! kill -0 "$p" 2>/dev/null; then
        CURRENT_LOG=$2
        die "$1 is not running"
    fi
}

wait_for() { # description timeout_s logfile daemon-name command...
    local what=$1 t=$2 logf=$3 dname=$4
    shift 4
    local deadline=$((SECONDS + t))
    CURRENT_LOG=$logf
    until "$@" >/dev/null 2>&1; do
        [ -n "$dname" ] && check_alive "$dname" "$logf"
        [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${t}s waiting for $what"
        sleep 1
    done
}

mgr_available() { cephcli mgr stat -f json 2>/dev/null | grep -q '"available": *true'; }
osd_up_simple() { [ "$(cephcli osd stat -f json 2>/dev/null | sed -n 's/.*"num_up_osds": *\([0-9]*\).*/\1/p')" = 1 ]; }
mon_quorum() { cephcli quorum_status -f json >/dev/null 2>&1; }

rados_roundtrip() {
    local tmp_in="$DIR/tmp/probe.in" tmp_out="$DIR/tmp/probe.out"
    echo "probe $(date +%s.%N)" >"$tmp_in"
    rm -f "$tmp_out"
    timeout 10 rados -c "$CONF" -p "$POOL" put ceph-single-node-probe "$tmp_in" &&
        timeout 10 rados -c "$CONF" -p "$POOL" get ceph-single-node-probe "$tmp_out" &&
        cmp -s "$tmp_in" "$tmp_out" &&
        timeout 10 rados -c "$CONF" -p "$POOL" rm ceph-single-node-probe
}

create_cluster() {
    local port=$1 fsid osd_uuid osd_secret osd_id
    fsid=$(cat /proc/sys/kernel/random/uuid)
    mkdir -p "$DIR/mon" "$DIR/mgr" "$DIR/osd0" "$DIR/log" "$RUN" "$DIR/crash" "$DIR/tmp"
    write_conf "$fsid" "$port"
    log "fsid $fsid, mon at 127.0.0.1:$port, conf $CONF"

    # Keys: mon., client.admin (all caps), mgr.x, osd.0.
    CURRENT_LOG=""
    ceph-authtool --create-keyring "$DIR/tmp/mon.keyring" --gen-key -n mon. \
        --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$DIR/ceph.client.admin.keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool --create-keyring "$DIR/mgr/keyring" --gen-key -n "mgr.$MGR_ID" \
        --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *' >/dev/null
    osd_secret=$(ceph-authtool --gen-print-key)
    ceph-authtool --create-keyring "$DIR/osd0/keyring" -n osd.0 --add-key "$osd_secret" \
        --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
    # The mon's initial auth database: mon., client.admin and mgr.x.
    ceph-authtool "$DIR/tmp/mon.keyring" --import-keyring "$DIR/ceph.client.admin.keyring" >/dev/null
    ceph-authtool "$DIR/tmp/mon.keyring" --import-keyring "$DIR/mgr/keyring" >/dev/null
    chmod 600 "$DIR/tmp/mon.keyring" "$DIR/mgr/keyring" "$DIR/osd0/keyring"
    chmod 644 "$DIR/ceph.client.admin.keyring"  # a throwaway test cluster: let any local user connect

    # Monitor.
    monmaptool --create --fsid "$fsid" --addv "$MON_ID" "[v1:127.0.0.1:$port]" \
        "$DIR/tmp/monmap" >/dev/null
    CURRENT_LOG="$DIR/log/ceph-mon.$MON_ID.log"
    log "creating mon.$MON_ID"
    ceph-mon -c "$CONF" --mkfs -i "$MON_ID" --monmap "$DIR/tmp/monmap" \
        --keyring "$DIR/tmp/mon.keyring" >>"$DIR/log/mon.mkfs.log" 2>&1 || {
        CURRENT_LOG="$DIR/log/mon.mkfs.log"
        die "ceph-mon --mkfs failed"
    }
    cp "$DIR/tmp/mon.keyring" "$DIR/mon/keyring"
    start_daemon "mon.$MON_ID" "$DIR/log/ceph-mon.$MON_ID.log" ceph-mon -c "$CONF" -i "$MON_ID"
    wait_for "the monitor to form a quorum" 60 "$DIR/log/ceph-mon.$MON_ID.log" "mon.$MON_ID" mon_quorum

    # Manager.
    start_daemon "mgr.$MGR_ID" "$DIR/log/ceph-mgr.$MGR_ID.log" ceph-mgr -c "$CONF" -i "$MGR_ID"

    # OSD: register it with the mon (same key as in its keyring), then mkfs.
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    CURRENT_LOG="$DIR/log/ceph-mon.$MON_ID.log"
    log "registering osd.0"
    printf '{"cephx_secret": "%s"}\n' "$osd_secret" >"$DIR/tmp/osd-new.json"
    osd_id=$(cephcli osd new "$osd_uuid" 0 -i "$DIR/tmp/osd-new.json") ||
        die "ceph osd new failed"
    rm -f "$DIR/tmp/osd-new.json"
    [ "$osd_id" = 0 ] || die "expected osd id 0, got '$osd_id'"
    CURRENT_LOG="$DIR/log/ceph-osd.0.log"
    log "creating osd.0 (BlueStore on $DIR/osd0/block, ${OSD_SIZE_GB} GiB sparse)"
    ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$DIR/log/osd.mkfs.log" 2>&1 ||
        die "ceph-osd --mkfs failed (its output: $DIR/log/osd.mkfs.log)"
    if [ ! -f "$DIR/osd0/block" ] || [ -L "$DIR/osd0/block" ]; then
        die "ceph-osd --mkfs made no plain block file $DIR/osd0/block"
    fi
    touch "$DIR/.ceph-single-node"
    start_daemon osd.0 "$DIR/log/ceph-osd.0.log" ceph-osd -c "$CONF" -i 0
    wait_for "osd.0 to be up" 60 "$DIR/log/ceph-osd.0.log" osd.0 osd_up_simple

    # Pool.
    CURRENT_LOG="$DIR/log/ceph-mon.$MON_ID.log"
    log "creating pool $POOL (replicated, size 1)"
    ceph_or_die osd pool create "$POOL" 8 8 replicated
    ceph_or_die osd pool set "$POOL" size 1 --yes-i-really-mean-it
    ceph_or_die osd pool set "$POOL" min_size 1
    ceph_or_die osd pool application enable "$POOL" rados
}

restart_cluster() {
    log "$DIR already holds a cluster; starting its daemons again"
    mkdir -p "$RUN" "$DIR/log" "$DIR/tmp"
    start_daemon "mon.$MON_ID" "$DIR/log/ceph-mon.$MON_ID.log" ceph-mon -c "$CONF" -i "$MON_ID"
    wait_for "the monitor to form a quorum" 60 "$DIR/log/ceph-mon.$MON_ID.log" "mon.$MON_ID" mon_quorum
    start_daemon "mgr.$MGR_ID" "$DIR/log/ceph-mgr.$MGR_ID.log" ceph-mgr -c "$CONF" -i "$MGR_ID"
    start_daemon osd.0 "$DIR/log/ceph-osd.0.log" ceph-osd -c "$CONF" -i 0
    wait_for "osd.0 to be up" 60 "$DIR/log/ceph-osd.0.log" osd.0 osd_up_simple
}

start_cluster() {
    local t0=$SECONDS port
    install_packages

    if [ -f "$DIR/.ceph-single-node" ] && [ -f "$CONF" ]; then
        if [ -n "$(pids_using_conf)" ]; then
            log "daemons for $DIR are already running; checking I/O"
        else
            port=$(sed -n 's/^mon_host = v1:127\.0\.0\.1:\([0-9]*\)$/\1/p' "$CONF")
            [ -n "$port" ] || die "cannot read the mon port from $CONF"
            ! port_in_use "$port" || die "127.0.0.1:$port is already in use by another process"
            restart_cluster
        fi
    else
        if [ -d "$DIR" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
            die "$DIR is not empty and holds no cluster made by $PROG; use a fresh directory"
        fi
        case "$OSD_SIZE_GB" in '' | *[!0-9]* | 0) die "CEPH_OSD_SIZE_GB must be a whole number >= 1, not '$OSD_SIZE_GB'" ;; esac
        port=${CEPH_MON_PORT:-6789}
        case "$port" in '' | *[!0-9]*) die "CEPH_MON_PORT must be a number, not '$port'" ;; esac
        ! port_in_use "$port" ||
            die "127.0.0.1:$port is already in use (another cluster? set CEPH_MON_PORT)"
        mkdir -p "$DIR"
        create_cluster "$port"
    fi

    # The mgr is not needed for I/O but should be there for `ceph -s`.
    wait_for "mgr.$MGR_ID to become available" 60 "$DIR/log/ceph-mgr.$MGR_ID.log" "mgr.$MGR_ID" mgr_available

    log "waiting (up to ${START_TIMEOUT}s) until an object can be written to and read from pool $POOL"
    wait_for "a rados put/get on pool $POOL to succeed" "$START_TIMEOUT" \
        "$DIR/log/ceph-osd.0.log" osd.0 rados_roundtrip
    local health
    health=$(cephcli health 2>/dev/null || true)
    log "cluster up in $((SECONDS - t0))s: health: ${health:-unknown}"
    log "connect with: rados -c $CONF -p $POOL ...  (user client.admin, keyring $DIR/ceph.client.admin.keyring)"
}

# --------------------------------------------------------------------------

[ $# -eq 2 ] || usage
CMD=$1
case "$2" in
    /*) DIR=$2 ;;
    *) DIR=$(pwd)/$2 ;;
esac
DIR=${DIR%/}
CONF=$DIR/ceph.conf
RUN=$DIR/run

case "$CMD" in
    start) start_cluster ;;
    stop)
        [ -d "$DIR" ] || { log "$DIR does not exist; nothing to stop"; exit 0; }
        stop_cluster
        ;;
    *) usage ;;
esac
