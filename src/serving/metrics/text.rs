//! Exposition text the recorder cannot hold, rendered by hand after its
//! own: the device latency histograms (kept by the volume's
//! [`crate::device::IoMeter`]s in fixed buckets, so they are rendered as they
//! are rather than re-recorded), counters in seconds, and the standard
//! `process_*` metrics read from `/proc/self` (the names client libraries
//! use, so existing dashboards work).

use std::fmt::Write as _;

use super::super::live::Live;
use crate::device::{IoClass, IoOp, IO_BUCKETS};
use crate::volume::Tier;

/// Every hand-rendered family.
pub fn render(live: &Live) -> String {
    let mut out = String::new();
    device(live, &mut out);
    migration(live, &mut out);
    process(&mut out);
    out
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn device(live: &Live, out: &mut String) {
    let vol = &live.volume;
    let name = "tierd_device_io_duration_seconds";
    head(
        out,
        name,
        "histogram",
        "Device operation time by tier, op and class (foreground: users' requests; background: migration, write-back, pre-cleaning)",
    );
    for t in Tier::ALL {
        let m = vol.io_meter(t);
        for op in IoOp::ALL {
            for class in IoClass::ALL {
                let l = m.latencies(op, class);
                let labels = format!(
                    "tier=\"{}\",op=\"{}\",class=\"{}\"",
                    t.name(),
                    op.name(),
                    class.name()
                );
                let mut cum = 0u64;
                for (i, n) in l.counts.iter().enumerate() {
                    cum += n;
                    let le = match IO_BUCKETS.get(i) {
                        Some(b) => format!("{b}"),
                        None => "+Inf".into(),
                    };
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cum}");
                }
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", l.sum_secs);
                let _ = writeln!(out, "{name}_count{{{labels}}} {cum}");
            }
        }
    }
    let name = "tierd_device_io_time_seconds_total";
    head(
        out,
        name,
        "counter",
        "Seconds each tier's device had at least one operation in flight (node_exporter's io_time)",
    );
    for t in Tier::ALL {
        let _ = writeln!(
            out,
            "{name}{{tier=\"{}\"}} {}",
            t.name(),
            vol.io_meter(t).busy_secs()
        );
    }
}

fn migration(live: &Live, out: &mut String) {
    let p = live.migrator.progress();
    for (name, help, v) in [
        (
            "tierd_migration_backoff_seconds_total",
            "Seconds migration waited for busy foreground I/O",
            p.backoff_secs,
        ),
        (
            "tierd_migration_throttle_seconds_total",
            "Seconds migration copies waited for the bandwidth budget",
            p.throttle_secs,
        ),
    ] {
        head(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// What `/proc/self` says of this process.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_secs: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    threads: u64,
    start_time_secs: f64,
    open_fds: u64,
    max_fds: Option<u64>,
}

/// Parse `/proc/self/stat` (the fields after the command name, which may
/// hold spaces and parentheses), given the clock tick rate, the page size
/// and the boot time from `/proc/stat`.
fn parse_stat(stat: &str, ticks: f64, page: u64, boot_secs: f64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state) of proc(5).
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(ProcessStats {
        cpu_secs: (field(14)? + field(15)?) as f64 / ticks,
        threads: field(20)?,
        start_time_secs: boot_secs + field(22)? as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page,
        ..ProcessStats::default()
    })
}

fn process_stats() -> Option<ProcessStats> {
    // SAFETY: sysconf reads a configuration value; it takes no pointers and
    // has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut p = parse_stat(&stat, ticks as f64, page as u64, boot)?;
    p.open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    p.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
    Some(p)
}

fn process(out: &mut String) {
    let Some(p) = process_stats() else {
        return;
    };
    let mut one = |name: &str, kind: &str, help: &str, v: String| {
        head(out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    };
    one(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        p.cpu_secs.to_string(),
    );
    one(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        p.resident_bytes.to_string(),
    );
    one(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        p.virtual_bytes.to_string(),
    );
    one(
        "process_threads",
        "gauge",
        "Number of OS threads in the process.",
        p.threads.to_string(),
    );
    one(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        p.start_time_secs.to_string(),
    );
    one(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        p.open_fds.to_string(),
    );
    if let Some(max) = p.max_fds {
        one(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max.to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        // A command name with a space and a parenthesis, as proc(5) allows.
        let stat = "4242 (tierd (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 2048 18446744073709551615";
        let p = parse_stat(stat, 100.0, 4096, 1_700_000_000.0).expect("parses");
        assert_eq!(p.cpu_secs, 3.0);
        assert_eq!(p.threads, 7);
        assert_eq!(p.start_time_secs, 1_700_000_010.0);
        assert_eq!(p.virtual_bytes, 123_456_789);
        assert_eq!(p.resident_bytes, 2048 * 4096);
        assert!(parse_stat("garbage", 100.0, 4096, 0.0).is_none());
    }

    #[test]
    fn this_process_is_readable() {
        let p = process_stats().expect("/proc/self is readable");
        assert!(
            p.threads >= 1 && p.open_fds >= 3 && p.resident_bytes > 0,
            "{p:?}"
        );
    }
}
