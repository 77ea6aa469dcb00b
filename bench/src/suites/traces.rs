//! Trace replays (`tierd bench --trace FILE`): each trace played on the
//! three targets ([`crate::replay`]), and the same references through the
//! classic policies and the offline optimum at the hybrid's SSD size and
//! at a range of sizes ([`crate::sim`]): SSD read-hit share, write share
//! on flash, migration bytes per host byte and SSD bytes written, side by
//! side, and a chart of read-hit share against SSD size.

use super::{point, Bench, Chart, Goal};
use crate::replay::{self, Fitted};
use crate::sim::{curve, simulate, PolicyKind, SimConfig, SimResult};
use crate::target::Mode;
use tierd::volume::{Stats, Tier};

/// What the hybrid did over one replay, from its counters.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    read_hit: [u64; 2],
    landed: [u64; 2],
    migrated: [u64; 2],
    /// Admission at the miss: brought up, scan misses remembered, left for
    /// the HDD's users.
    admission: [u64; 3],
}

impl Counters {
    fn of(s: &Stats) -> Counters {
        let two = |a: &[std::sync::atomic::AtomicU64; 2]| [Stats::get(&a[0]), Stats::get(&a[1])];
        Counters {
            read_hit: two(&s.read_hit_bytes),
            landed: two(&s.write_landed_bytes),
            migrated: two(&s.migrated_bytes),
            admission: [
                Stats::get(&s.admissions),
                Stats::get(&s.admissions_scanned),
                Stats::get(&s.admissions_paced),
            ],
        }
    }

    fn since(self, before: Counters) -> Counters {
        let d = |a: [u64; 2], b: [u64; 2]| [a[0] - b[0], a[1] - b[1]];
        Counters {
            read_hit: d(self.read_hit, before.read_hit),
            landed: d(self.landed, before.landed),
            migrated: d(self.migrated, before.migrated),
            admission: [0, 1, 2].map(|i| self.admission[i] - before.admission[i]),
        }
    }
}

/// Share `a / (a + b)`, 0 when both are 0.
fn share(a: u64, b: u64) -> f64 {
    if a + b == 0 {
        0.0
    } else {
        a as f64 / (a + b) as f64
    }
}

impl Bench {
    /// Where a trace's footprint goes: from the first extent the used state
    /// put on the HDD, to the end of what the pure HDD holds too.
    pub(crate) fn trace_room(&self) -> (u64, u64) {
        let es = self.extent_size;
        let base = self
            .targets
            .first()
            .and_then(|t| t.volume())
            .map(|v| {
                let n = v.geometry().logical_extents();
                (0..n)
                    .find(|e| v.mapping(*e).is_some_and(|m| m.loc.tier == Tier::Hdd))
                    .unwrap_or(n)
            })
            .unwrap_or(0)
            * es;
        (base, self.capacity.min(self.hdd_size))
    }

    /// SSD extents the simulated policies may fill: what the hybrid keeps
    /// for data, its SSD less the reserve.
    fn sim_capacity(&self) -> u64 {
        self.targets
            .first()
            .and_then(|t| t.volume())
            .map(|v| {
                let g = v.geometry();
                u64::from(g.slots(Tier::Ssd)).saturating_sub(u64::from(g.reserve_extents))
            })
            .unwrap_or(0)
            .max(1)
    }

    /// Replay one fitted trace and compare with the policies.
    pub(crate) fn replay_trace(&mut self, trace: &Fitted) {
        let Mode::Virtual(sched) = self.mode.clone() else {
            return;
        };
        let suite = "trace";
        let case = trace.name.clone();
        let (read_bytes, write_bytes) = trace.bytes();
        let mut hybrid = Counters::default();
        for i in 0..self.targets.len() {
            let before = self.targets[i].volume().map(|v| Counters::of(v.stats()));
            let mig = if i == 0 { self.migrator.clone() } else { None };
            self.progress(&format!(
                "trace {case} on {} ({} requests)",
                self.targets[i].name(),
                trace.records.len()
            ));
            let m = replay::execute(
                &sched,
                self.targets[i].as_ref(),
                trace,
                self.opts.trace_speed,
                mig.as_deref(),
            );
            if let (Some(b), Some(v)) = (before, self.targets[i].volume()) {
                hybrid = Counters::of(v.stats()).since(b);
            }
            let spec = crate::workload::Spec::simple(
                share(read_bytes, write_bytes),
                1.0,
                0,
                trace.base,
                trace.extents * self.extent_size,
            );
            let mut p = point(self, suite, &case, self.targets[i].as_ref(), 0, &spec, &m);
            p.block = (read_bytes + write_bytes) / (m.ops.max(1));
            self.points.push(p);
        }
        let host = read_bytes + write_bytes;
        let (ssd, hdd) = (Tier::Ssd.index(), Tier::Hdd.index());
        let hyb_read = share(hybrid.read_hit[ssd], hybrid.read_hit[hdd]);
        let hyb_write = share(hybrid.landed[ssd], hybrid.landed[hdd]);
        let hyb_moved = hybrid.migrated[ssd] + hybrid.migrated[hdd];
        let cap = self.sim_capacity();
        let es = self.extent_size;
        let what = format!(
            "{} requests over {:.0} s ({} replayed {}x faster), {} extents ({} MiB) touched, SSD room {} MiB",
            trace.records.len(),
            trace.duration().as_secs_f64(),
            trace.source,
            self.opts.trace_speed,
            trace.extents,
            (trace.extents * es) >> 20,
            (cap * es) >> 20
        );
        self.finding(
            suite,
            &format!("{case}/hybrid-read-hit-share"),
            hyb_read,
            "share",
            format!("read bytes served by the SSD; {what}"),
        );
        self.finding(
            suite,
            &format!("{case}/hybrid-write-ssd-share"),
            hyb_write,
            "share",
            "write bytes that landed on flash (SSD extents and the write log)".into(),
        );
        self.finding(
            suite,
            &format!("{case}/hybrid-migration-per-host-byte"),
            hyb_moved as f64 / host.max(1) as f64,
            "ratio",
            format!(
                "{} MiB promoted, {} MiB demoted or written back, for {} MiB of requests",
                hybrid.migrated[ssd] >> 20,
                hybrid.migrated[hdd] >> 20,
                host >> 20
            ),
        );
        let admitting = self
            .targets
            .first()
            .and_then(|t| t.volume())
            .is_some_and(|v| v.admission_enabled());
        if admitting {
            let [up, remembered, paced] = hybrid.admission;
            self.finding(
                suite,
                &format!("{case}/hybrid-admissions"),
                up as f64,
                "extents",
                format!(
                    "brought up at the miss; {remembered} scan misses only remembered, {paced} left for the HDD's users (migrate.admission-share)"
                ),
            );
        }
        let accesses = trace.accesses();
        let cfg = SimConfig {
            unit: es,
            capacity_units: cap,
        };
        let mut results: Vec<SimResult> = Vec::new();
        for kind in PolicyKind::ALL {
            let r = simulate(kind, &cfg, &accesses);
            self.finding(
                suite,
                &format!("{case}/{}-read-hit-share", kind.name()),
                r.read_hit_share(),
                "share",
                format!(
                    "migration {:.3} bytes per host byte, {} MiB written to the SSD",
                    r.migration_per_host_byte(),
                    r.ssd_write_bytes >> 20
                ),
            );
            results.push(r);
        }
        let read_of = |k: PolicyKind| {
            results
                .iter()
                .find(|r| r.policy == k)
                .map_or(0.0, SimResult::read_hit_share)
        };
        let best_classic = [PolicyKind::Lru, PolicyKind::Arc, PolicyKind::Smq]
            .into_iter()
            .map(read_of)
            .fold(0.0, f64::max);
        let optimal = read_of(PolicyKind::Optimal);
        let vs_optimal = |share: f64| if optimal > 0.0 { share / optimal } else { 0.0 };
        self.finding_against(
            suite,
            &format!("{case}/hybrid-vs-optimal"),
            vs_optimal(hyb_read),
            "ratio",
            format!("read-hit share against the offline optimum's {optimal:.3}"),
            Goal::AtLeast(0.95),
        );
        let popular = read_of(PolicyKind::Popular);
        self.finding(
            suite,
            &format!("{case}/popular-vs-optimal"),
            vs_optimal(popular),
            "ratio",
            format!(
                "the popularity oracle's {popular:.3} against the optimum: the most an online \
                 policy gets on independent references"
            ),
        );
        self.finding_against(
            suite,
            &format!("{case}/hybrid-minus-best-classic"),
            hyb_read - best_classic,
            "share",
            format!("against the best of LRU, ARC and smq-like, {best_classic:.3}"),
            Goal::AtLeast(0.0),
        );
        // How big an SSD: read-hit share against SSD size, 1/8x to 4x the
        // hybrid's room, up to the footprint.
        let mut caps: Vec<u64> = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0]
            .iter()
            .map(|f| ((cap as f64 * f).round() as u64).clamp(1, trace.extents.max(1)))
            .collect();
        caps.dedup();
        let mut chart = Chart {
            name: format!("trace-{case}"),
            title: format!("{case}: SSD read-hit share against SSD size"),
            x_label: "SSD GiB for data".into(),
            y_label: "read-hit share %".into(),
            log_x: false,
            series: Vec::new(),
            x_names: Vec::new(),
            below: Vec::new(),
        };
        let gib = |units: u64| (units * es) as f64 / (1u64 << 30) as f64;
        for kind in PolicyKind::ALL {
            let pts: Vec<(f64, f64)> = curve(&[kind], es, &caps, &accesses)
                .iter()
                .map(|r| (gib(r.capacity_units), 100.0 * r.read_hit_share()))
                .collect();
            chart.series.push((kind.name().to_string(), pts));
        }
        chart
            .series
            .push(("tierd".into(), vec![(gib(cap), 100.0 * hyb_read)]));
        self.charts.push(chart);
    }
}
