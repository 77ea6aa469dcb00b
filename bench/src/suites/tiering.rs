//! The tiering suites: Zipf hot sets against the SSD size, the hot-set
//! shift, a sequential scan beside a hot set, the landing-zone burst and
//! fill-then-trim; with the warm-up and placement helpers they share.

use std::time::Duration;

use super::{point, push, Bench, Chart, Goal, Panel, Point, KIB, MIB};
use crate::target::{execute, Measurement, Run};
use crate::workload::{Skew, Spec};
use tierd::clock::Clock;
use tierd::volume::Tier;

impl Bench {
    /// The Zipf working-set region for a factor of the SSD size.
    fn zipf_spec(&self, factor: f64) -> Spec {
        let es = self.extent_size;
        let ws = ((self.ssd_size as f64 * factor) as u64 / es).max(1) * es;
        let cap = self.capacity;
        let ws = ws.min(cap);
        // Away from the start, so the pre-filled placement is mostly HDD.
        let start = ((cap - ws) / 2) / es * es;
        Spec {
            read: 0.9,
            random: 1.0,
            sizes: vec![(4 * KIB, 1)],
            align: 4 * KIB,
            start,
            len: ws,
            skew: Skew::Zipf {
                theta: 0.99,
                chunk: es,
                shift: 0,
            },
        }
    }

    /// Share of the extents of `[start, start+len)` that sit on the SSD.
    fn ssd_share(&self, start: u64, len: u64) -> Option<f64> {
        let vol = self.targets[0].volume()?;
        let es = self.extent_size;
        let (first, n) = (start / es, (len / es).max(1));
        let on = (first..first + n)
            .filter(|e| vol.mapping(*e).map(|m| m.loc.tier) == Some(Tier::Ssd))
            .count();
        Some(on as f64 / n as f64)
    }

    /// Now on the benchmark's clock (modelled or real).
    fn clock_now(&self) -> Duration {
        match &self.mode {
            crate::Mode::Virtual(sched) => sched.now(),
            crate::Mode::Real(clock) => clock.now(),
        }
    }

    /// Warm the hybrid with `spec` for `secs` of modelled time.
    fn warm(&mut self, spec: &Spec, secs: f64, shift: u64) -> Measurement {
        let mut s = spec.clone();
        if let Skew::Zipf { shift: sh, .. } = &mut s.skew {
            *sh = shift;
        }
        let run = Run {
            spec: s,
            qd: 4,
            duration: self.dur(secs),
            seed: self.opts.seed ^ 0x5eed,
            bin: Duration::from_secs(1),
            shift: None,
            migrator: self.migrator.as_deref(),
            background: None,
        };
        execute(&self.mode, self.targets[0].as_ref(), &run)
    }

    /// Warm the hybrid in 10 s steps until its IOPS stop growing (no new
    /// best by 3 % for three steps) while the migrator has settled (a step
    /// moved at most 1 % of the working set's extents), or `max` seconds
    /// pass; returns the seconds spent. Without the second condition a
    /// migration wave, which holds IOPS down while it runs, looked settled.
    fn warm_until_stable(&mut self, spec: &Spec, shift: u64) -> f64 {
        let max = if self.opts.quick { 900.0 } else { 3600.0 };
        let moved = |b: &Self| {
            b.targets[0]
                .volume()
                .map(|v| {
                    let s = v.stats();
                    tierd::volume::Stats::get(&s.migrated_bytes[0])
                        + tierd::volume::Stats::get(&s.migrated_bytes[1])
                })
                .unwrap_or(0)
        };
        let settled_below = (spec.len / 100).max(self.extent_size);
        let (mut t, mut best, mut stale) = (0.0, 0.0, 0);
        while t < max * self.opts.time_scale {
            let before = moved(self);
            let m = self.warm(spec, 10.0, shift);
            t += 10.0 * self.opts.time_scale;
            let now = m.iops();
            let settled = moved(self).saturating_sub(before) <= settled_below;
            self.progress(&format!("warming up: {t:.0} s, hybrid {now:.0} IOPS"));
            if now > best * 1.03 {
                best = now;
                stale = 0;
            } else if settled {
                stale += 1;
                if stale >= 3 {
                    break;
                }
            }
        }
        t
    }

    pub(super) fn zipf(&mut self) {
        let factors: &[f64] = if self.opts.quick {
            &[0.5, 0.7, 1.0]
        } else {
            &[0.5, 0.7, 1.0, 2.0, 4.0]
        };
        for &f in factors {
            let spec = self.zipf_spec(f);
            let warmed = self.warm_until_stable(&spec, 0);
            let mass = self.zipf_mass_on_ssd(&spec);
            let pts = self.case("zipf", &format!("zipf0.99-ws{f}x"), &spec, 4, self.dur(3.0));
            let (h, s, d) = (pts[0].iops, pts[1].iops, pts[2].iops);
            self.finding(
                "zipf",
                &format!("ws{f}x-hybrid/pure-ssd"),
                h / s.max(1e-9),
                "ratio",
                format!("working set {f}x the SSD, after {warmed:.0} s of warm-up"),
            );
            self.finding(
                "zipf",
                &format!("ws{f}x-hybrid/pure-hdd"),
                h / d.max(1e-9),
                "ratio",
                format!("working set {f}x the SSD"),
            );
            if let Some((on, best)) = mass {
                self.finding(
                    "zipf",
                    &format!("ws{f}x-access-share-on-ssd"),
                    on,
                    "ratio",
                    format!(
                        "share of the workload's accesses whose extent is on the SSD; {best:.3} at best (the hottest extents filling the SSD less the reserve)"
                    ),
                );
            }
        }
    }

    /// For a Zipf `spec`: the share of its accesses that land on extents the
    /// hybrid holds on the SSD, and the best share possible (its hottest
    /// ranks filling the SSD's slots outside the reserve).
    fn zipf_mass_on_ssd(&self, spec: &Spec) -> Option<(f64, f64)> {
        let vol = self.targets[0].volume()?;
        let Skew::Zipf { theta, chunk, .. } = spec.skew else {
            return None;
        };
        let n = (spec.len / chunk).max(1);
        let perm = crate::workload::Scramble::new(n);
        let first = spec.start / chunk;
        let weight = |r: u64| 1.0 / ((r + 1) as f64).powf(theta);
        let total: f64 = (0..n).map(weight).sum();
        let on: f64 = (0..n)
            .filter(|r| vol.mapping(first + perm.chunk(*r)).map(|m| m.loc.tier) == Some(Tier::Ssd))
            .map(weight)
            .sum();
        let geo = vol.geometry();
        let room = u64::from(geo.ssd_slots.saturating_sub(geo.reserve_extents));
        let best: f64 = (0..n.min(room)).map(weight).sum();
        Some((on / total, best / total))
    }

    pub(super) fn shift(&mut self) {
        let Some(vol) = self.targets[0].volume().cloned() else {
            return;
        };
        // The old hot set: a Zipf working set of a quarter of the SSD in the
        // middle of the volume, warmed until settled. The new one: the same
        // shape in a region three quarters in, which nothing has touched.
        let old = self.zipf_spec(0.25);
        let es = self.extent_size;
        let n = old.len / es;
        self.warm_until_stable(&old, 0);
        let mut spec = old.clone();
        spec.start = (self.capacity.min(self.hdd_size) * 3 / 4) / es * es;
        let shift = 0;
        // The new hot set: every extent of the new region (the zipf suite's
        // meaning of a hot set); also followed, its hottest tenth (the
        // chunks of the top tenth of the ranks).
        let region: Vec<u64> = (0..n).map(|r| spec.start / es + r).collect();
        let perm = crate::workload::Scramble::new(n);
        let top: Vec<u64> = (0..(n / 10).max(1))
            .map(|r| spec.start / es + perm.chunk(r))
            .collect();
        let share = |set: &[u64]| {
            set.iter()
                .filter(|e| vol.mapping(**e).map(|m| m.loc.tier) == Some(Tier::Ssd))
                .count() as f64
                / set.len() as f64
        };
        let already = share(&region);
        let floor = self.shift_floor(&vol, &region);
        let seq_secs: std::collections::HashMap<&str, Option<f64>> = [
            ("", self.hdd_seq_secs(&vol, &region)),
            ("top-tenth-", self.hdd_seq_secs(&vol, &top)),
        ]
        .into_iter()
        .collect();
        let mut series = Vec::new();
        let step = 1.0;
        let (mut t_region, mut t_top) = (None, None);
        let mut t = 0.0;
        // Time as the clock measures it: a step lasts until the migrator's
        // round in it ends, which may be later than `step`.
        let t0 = self.clock_now();
        // Long enough for a slow convergence to be measured, not cut off.
        let cap = seq_secs
            .get("")
            .copied()
            .flatten()
            .map_or(600.0, |q| (10.0 * q).max(600.0));
        while t < cap && t_region.is_none() {
            let m = self.warm(&spec, step, shift);
            t = self.clock_now().saturating_sub(t0).as_secs_f64();
            let (r, h) = (share(&region), share(&top));
            series.push((t, m.iops(), r, h));
            if h >= 0.9 && t_top.is_none() {
                t_top = Some(t);
            }
            if r >= 0.9 {
                t_region = Some(t);
            }
        }
        // Two quantities, two panels on one time axis: the hybrid's IOPS
        // above, the share of the new hot set on the SSD (0..100 %) below.
        let on_ssd = Panel {
            y_label: "new hot set on the SSD (%)".into(),
            y_max: Some(100.0),
            series: vec![
                ("every extent".into(), Vec::new()),
                ("its top tenth".into(), Vec::new()),
            ],
        };
        let mut chart = Chart {
            name: "shift".into(),
            title: "Hot-set shift: hybrid IOPS and share of the new hot set on the SSD".into(),
            x_label: "seconds after the shift".into(),
            y_label: "hybrid IOPS".into(),
            log_x: false,
            series: vec![("hybrid".into(), Vec::new())],
            x_names: Vec::new(),
            below: vec![on_ssd],
        };
        for (t, iops, r, h) in &series {
            chart.series[0].1.push((*t, *iops));
            chart.below[0].series[0].1.push((*t, r * 100.0));
            chart.below[0].series[1].1.push((*t, h * 100.0));
        }
        self.charts.push(chart);
        for (name, set, conv) in [("", &region, t_region), ("top-tenth-", &top, t_top)] {
            let bytes = set.len() as u64 * es;
            let seq = seq_secs.get(name).copied().flatten();
            let Some(t) = conv else {
                self.finding(
                    "shift",
                    &format!("{name}time-to-90pct"),
                    f64::INFINITY,
                    "s",
                    format!("did not reach 90 % within {t:.0} s"),
                );
                continue;
            };
            let seq_note = match seq {
                Some(q) => format!("the HDD reads them sequentially, where they lie, in {q:.1} s"),
                None => "no HDD model: the sequential read time is not known".into(),
            };
            self.finding(
                "shift",
                &format!("{name}time-to-90pct"),
                t,
                "s",
                format!(
                    "{} extents ({} MiB, {:.0} % on the SSD at the shift); {seq_note}",
                    set.len(),
                    bytes / MIB,
                    if name.is_empty() {
                        already * 100.0
                    } else {
                        0.0
                    },
                ),
            );
            if let (true, Some(f)) = (name.is_empty(), floor) {
                self.finding(
                    "shift",
                    "physical-floor",
                    f.secs,
                    "s",
                    format!(
                        "the least HDD time the move can take: reading the {} extents not on the SSD where they lie ({:.1} s) and writing the {} victims without a clean HDD copy that the full SSD forces out ({:.1} s), at the model's zone rates",
                        f.reads, f.read_secs, f.writes, f.write_secs
                    ),
                );
                self.finding_against(
                    "shift",
                    "time/physical-floor",
                    t / f.secs.max(1e-9),
                    "ratio",
                    "time to 90 % against the physical floor".into(),
                    Goal::AtMost(1.2),
                );
            }
            if let Some(q) = seq {
                self.finding_against(
                    "shift",
                    &format!("{name}time/hdd-sequential-read"),
                    t / q.max(1e-9),
                    "ratio",
                    format!(
                        "time to 90 % against the HDD model's {q:.1} s to read the set sequentially where it lies"
                    ),
                    Goal::AtMost(2.0),
                );
            }
        }
    }

    /// The least HDD time a move of `set` onto the SSD can take, as the
    /// volume lies now: read each of its extents not on the SSD where it
    /// lies, and write out the victims the SSD cannot avoid. Room above the
    /// reserve takes extents for free; past it each extent pushes one out,
    /// and a victim with a clean HDD copy leaves by a mapping change (the
    /// policy takes those first), the others by a write at the rate where
    /// the set lies (a move takes a slot given back nearby). `None`
    /// without an HDD model.
    fn shift_floor(&self, vol: &tierd::volume::Volume, set: &[u64]) -> Option<ShiftFloor> {
        let model = self.hdd_model.as_ref()?;
        let geo = vol.geometry();
        let es = self.extent_size as f64;
        let mut read_secs = 0.0;
        let mut reads = 0u64;
        let mut at = Vec::new();
        for e in set {
            if let Some(m) = vol.mapping(*e).filter(|m| m.loc.tier == Tier::Hdd) {
                let off = geo.slot_offset(m.loc.slot);
                read_secs += es / model.rate_at(off);
                reads += 1;
                at.push(off);
            }
        }
        let in_set: std::collections::HashSet<u64> = set.iter().copied().collect();
        let clean = vol
            .ssd_extents()
            .iter()
            .filter(|(e, _, clean)| *clean && !in_set.contains(e))
            .count() as u64;
        let room =
            u64::from(vol.free_slots(Tier::Ssd)).saturating_sub(u64::from(geo.reserve_extents));
        let victims = reads.saturating_sub(room);
        let writes = victims.saturating_sub(clean);
        at.sort_unstable();
        let mid = at.get(at.len() / 2).copied().unwrap_or(0);
        let write_secs = writes as f64 * es / model.rate_at(mid);
        Some(ShiftFloor {
            secs: read_secs + write_secs,
            reads,
            read_secs,
            writes,
            write_secs,
        })
    }

    /// Seconds the HDD model needs to read `extents` sequentially where they
    /// lie now (the transfer rate falls from the outer to the inner tracks).
    fn hdd_seq_secs(&self, vol: &tierd::volume::Volume, extents: &[u64]) -> Option<f64> {
        let model = self.hdd_model.as_ref()?;
        let geo = vol.geometry();
        Some(
            extents
                .iter()
                .map(|e| {
                    let off = match vol.mapping(*e) {
                        Some(m) if m.loc.tier == Tier::Hdd => geo.slot_offset(m.loc.slot),
                        _ => 0,
                    };
                    self.extent_size as f64 / model.rate_at(off)
                })
                .sum(),
        )
    }

    /// Degradation and recovery: fill the region in five steps, measuring
    /// random 4 KiB writes at QD 4 after each; then TRIM it all and measure
    /// again.
    pub(super) fn fill_trim(&mut self) {
        let (rs, region, es) = (self.region_start, self.region, self.extent_size);
        let step = (region / 5) / es * es;
        let mut chart = self.chart(
            "fill-trim",
            "Random 4 KiB writes, QD 4, as the region fills; then TRIM",
            "filled (%)",
            "IOPS",
            false,
        );
        let probe = Spec::simple(0.0, 1.0, 4 * KIB, rs, region);
        for k in 0..5u64 {
            let fill = Spec::simple(0.0, 0.0, MIB, rs + k * step, step);
            // Long enough for the slowest target to write the step once.
            let secs = (step as f64 / (60.0 * MIB as f64)).max(2.0);
            self.case_with(
                "fill-trim",
                &format!("fill-step{}", k + 1),
                &fill,
                1,
                self.dur(secs),
                None,
            );
            let pts = self.case(
                "fill-trim",
                &format!("randwrite-at-{}pct", (k + 1) * 20),
                &probe,
                4,
                self.dur(2.0),
            );
            for p in &pts {
                push(&mut chart, &p.target, ((k + 1) * 20) as f64, p.iops);
            }
        }
        for t in &self.targets {
            let _ = t.trim(rs, region);
        }
        let pts = self.case(
            "fill-trim",
            "randwrite-after-trim",
            &probe,
            4,
            self.dur(2.0),
        );
        for p in &pts {
            push(&mut chart, &p.target, 120.0, p.iops);
        }
        chart.x_names.push((120.0, "after TRIM".into()));
        self.charts.push(chart);
    }

    /// Scan pollution: hot-set IOPS with and without a long sequential scan
    /// (twice the SSD) running next to it.
    pub(super) fn scan(&mut self) {
        let spec = self.zipf_spec(0.5);
        self.warm_until_stable(&spec, 0);
        let quiet = self.case("scan", "hotset-alone", &spec, 4, self.dur(3.0));
        let placed_before = self.ssd_share(spec.start, spec.len);
        let scan_len = (2 * self.ssd_size).min(self.capacity) / self.extent_size * self.extent_size;
        let scan = Spec::simple(1.0, 0.0, 256 * KIB, 0, scan_len);
        let busy = self.case_with(
            "scan",
            "hotset-with-scan",
            &spec,
            4,
            self.dur(20.0),
            Some((scan, 1)),
        );
        let placed_after = self.ssd_share(spec.start, spec.len);
        let after = self.case("scan", "hotset-after-scan", &spec, 4, self.dur(3.0));
        let h = |pts: &[Point]| pts.first().map(|p| p.iops).unwrap_or(0.0);
        let during = busy.first().map(|(p, _)| p.iops).unwrap_or(0.0);
        self.finding(
            "scan",
            "hybrid-hotset-after/before",
            h(&after) / h(&quiet).max(1e-9),
            "ratio",
            "hot-set IOPS in the 3 s after a 2x-SSD sequential scan vs before (a migration round running then costs IOPS too)".into(),
        );
        if let (Some(b), Some(a)) = (placed_before, placed_after) {
            self.finding(
                "scan",
                "hybrid-hotset-on-ssd-after/before",
                a / b.max(1e-9),
                "ratio",
                format!(
                    "share of the hot set's extents on the SSD: {:.1} % before the scan, {:.1} % after (1.0 = nothing evicted)",
                    b * 100.0,
                    a * 100.0
                ),
            );
        }
        self.finding(
            "scan",
            "hybrid-hotset-during/before",
            during / h(&quiet).max(1e-9),
            "ratio",
            "while the scan shares the devices".into(),
        );
    }

    pub(super) fn landing(&mut self) {
        let Some(vol) = self.targets[0].volume().cloned() else {
            return;
        };
        let es = self.extent_size;
        let reserve = u64::from(vol.geometry().reserve_extents) * es;
        let len = 2 * reserve;
        // Inside every target (the pure HDD is smaller than the volume).
        let start = (self.capacity.min(self.hdd_size) - len) / es * es;
        if self.targets[0].trim(start, len).is_err() || vol.flush().is_err() {
            return;
        }
        // Let the migrator restore the reserve before the burst.
        self.warm(&Spec::simple(1.0, 1.0, 4 * KIB, 0, es), 30.0, 0);
        let spec = Spec::simple(0.0, 0.0, 256 * KIB, start, len);
        let mut chart = self.chart(
            "landing",
            "Landing-zone burst: 2x the reserve of new writes, QD 4",
            "seconds",
            "MiB/s",
            false,
        );
        let background: Option<(Spec, usize)> = None;
        // Fine bins: the moment the reserve's worth has landed falls inside
        // one, and the split assumes that bin's completions evenly spread.
        // A 100 ms bin holding 16 ms of flash-speed writes and 84 ms of
        // HDD-speed ones put the moment 66 ms late on ssd-nvme, and the
        // hybrid's first reserve at 0.83x the pure SSD, whose every bin it
        // matched (1,297 writes each).
        let bin = Duration::from_millis(1);
        let per_op = 256.0 * KIB as f64 / MIB as f64;
        for i in 0..self.targets.len() {
            // Long enough for the hybrid to write 2x the reserve at SSD speed.
            let run = Run {
                spec: spec.clone(),
                qd: 4,
                duration: self.dur((len as f64 / (400.0 * MIB as f64)).max(5.0) * 2.0),
                seed: self.opts.seed,
                bin,
                shift: None,
                migrator: if i == 0 {
                    self.migrator.as_deref()
                } else {
                    None
                },
                background: background.clone(),
            };
            let m = execute(&self.mode, self.targets[i].as_ref(), &run);
            let p = point(
                self,
                "landing",
                "burst-256k-qd4",
                self.targets[i].as_ref(),
                4,
                &spec,
                &m,
            );
            let tname = p.target.clone();
            let split = landing_split(&m.series, bin.as_secs_f64(), per_op, (reserve / MIB) as f64);
            if let Some(first) = split.first {
                self.finding(
                    "landing",
                    &format!("{tname}-MiBps-first-reserve"),
                    first,
                    "MiB/s",
                    "while the first reserve's worth lands (the reserve's bytes over the time they took)"
                        .into(),
                );
            }
            if let Some(after) = split.after {
                self.finding(
                    "landing",
                    &format!("{tname}-MiBps-after"),
                    after,
                    "MiB/s",
                    "past the reserve (the rest of the bytes over the rest of the run)".into(),
                );
            }
            // The chart in 1 s bins.
            let per_s = (1.0 / bin.as_secs_f64()).round().max(1.0) as usize;
            for (s, n) in m.series.chunks(per_s).enumerate() {
                let ops: u64 = n.iter().sum();
                push(&mut chart, &p.target, s as f64, ops as f64 * per_op);
            }
            self.points.push(p);
        }
        self.add_landing_ratios();
        self.charts.push(chart);
    }
}

impl Bench {
    /// The landing ratios the issue holds the hybrid to: its first
    /// reserve's worth against the pure SSD's, and what lands after it
    /// against the pure HDD's whole run (same region, same writes).
    fn add_landing_ratios(&mut self) {
        let find = |b: &Bench, name: &str| {
            b.findings
                .iter()
                .rev()
                .find(|f| f.suite == "landing" && f.name == name)
                .map(|f| f.value)
        };
        let hdd = self
            .points
            .iter()
            .rev()
            .find(|p| p.suite == "landing" && p.target == "pure-hdd")
            .map(|p| p.mibps);
        if let (Some(h), Some(s)) = (
            find(self, "hybrid-MiBps-first-reserve"),
            find(self, "pure-ssd-MiBps-first-reserve"),
        ) {
            self.finding_against(
                "landing",
                "first-reserve/pure-ssd",
                h / s.max(1e-9),
                "ratio",
                "the hybrid landing its first reserve's worth against the pure SSD landing as much"
                    .into(),
                Goal::AtLeast(0.95),
            );
        }
        if let (Some(h), Some(d)) = (find(self, "hybrid-MiBps-after"), hdd) {
            self.finding_against(
                "landing",
                "after/pure-hdd",
                h / d.max(1e-9),
                "ratio",
                "the hybrid past its reserve against the pure HDD's whole run".into(),
                Goal::AtLeast(1.0),
            );
        }
    }
}

/// A landing run's throughput while the first reserve's worth landed and
/// after it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LandingSplit {
    /// MiB/s until `reserve` MiB had landed (`None`: they never did).
    first: Option<f64>,
    /// MiB/s of the rest of the run (`None`: nothing after).
    after: Option<f64>,
}

/// Split a run's completions per bin (`secs` wide, `per_op` MiB each) at
/// the moment `reserve` MiB had landed, found inside its bin by assuming
/// the bin's completions evenly spread; the run's last bin is partial and
/// left out.
fn landing_split(series: &[u64], secs: f64, per_op: f64, reserve: f64) -> LandingSplit {
    let full = &series[..series.len().saturating_sub(1)];
    let total: f64 = full.iter().map(|n| *n as f64 * per_op).sum();
    let run = full.len() as f64 * secs;
    let mut landed = 0.0;
    for (i, n) in full.iter().enumerate() {
        let mib = *n as f64 * per_op;
        if landed + mib >= reserve && mib > 0.0 {
            let t = (i as f64 + (reserve - landed) / mib) * secs;
            let after = (run - t > secs).then(|| (total - reserve) / (run - t));
            return LandingSplit {
                first: Some(reserve / t),
                after,
            };
        }
        landed += mib;
    }
    LandingSplit {
        first: None,
        after: None,
    }
}

/// The shift's physical floor, and its parts.
#[derive(Debug, Clone, Copy)]
struct ShiftFloor {
    secs: f64,
    reads: u64,
    read_secs: f64,
    writes: u64,
    write_secs: f64,
}

/// What the volume's counters say of one phase of the `return` suite.
#[derive(Debug, Clone, Copy, Default)]
struct PhaseCost {
    hdd_write_bytes: u64,
    free_demotions: u64,
    demotions: u64,
}

impl PhaseCost {
    fn of(vol: &tierd::volume::Volume) -> Self {
        use tierd::volume::Stats;
        let s = vol.stats();
        PhaseCost {
            hdd_write_bytes: Stats::get(&s.dev_write_bytes[Tier::Hdd.index()]),
            free_demotions: Stats::get(&s.free_demotions),
            demotions: s.migrations[Tier::Hdd.index()].iter().map(Stats::get).sum(),
        }
    }

    fn since(self, before: Self) -> Self {
        PhaseCost {
            hdd_write_bytes: self.hdd_write_bytes - before.hdd_write_bytes,
            free_demotions: self.free_demotions - before.free_demotions,
            demotions: self.demotions - before.demotions,
        }
    }
}

impl Bench {
    /// Warm with `spec` in 10 s steps until 90 % of its extents are on the
    /// SSD, or 600 s (3600 s at the full preset); the seconds spent. Unlike
    /// [`Bench::warm_until_stable`] this does not stop while hysteresis
    /// holds a new set back behind the heat of the last one.
    fn warm_until_on_ssd(&mut self, spec: &Spec) -> f64 {
        let max = if self.opts.quick { 600.0 } else { 3600.0 } * self.opts.time_scale;
        let mut t = 0.0;
        while t < max && self.ssd_share(spec.start, spec.len).unwrap_or(1.0) < 0.9 {
            self.warm(spec, 10.0, 0);
            t += 10.0 * self.opts.time_scale;
        }
        t
    }

    /// `secs` of modelled time with no foreground I/O, the migrator doing
    /// its rounds (a user's pause: write-back and pre-cleaning run).
    fn idle(&mut self, secs: f64) {
        let secs = secs * self.opts.time_scale;
        match (&self.mode, self.migrator.clone()) {
            (crate::Mode::Virtual(sched), Some(mig)) => {
                let sched = sched.clone();
                let interval = mig.config().interval;
                sched.phase(1, |p, _| {
                    let end = p.now() + Duration::from_secs_f64(secs);
                    while p.now() < end {
                        p.set_own_now(p.now());
                        let r = mig.run_round();
                        p.sleep_until(p.own_now());
                        if !r.more_waiting() {
                            p.sleep_until(p.now() + interval);
                        }
                    }
                });
            }
            (crate::Mode::Virtual(_), None) => {}
            (crate::Mode::Real(_), _) => std::thread::sleep(Duration::from_secs_f64(secs)),
        }
    }

    /// A hot set that leaves and comes back, on a volume with free space:
    /// set A is warmed, the volume is idle for a minute (pre-cleaning), then
    /// set B is warmed, then A again (each 0.6x the SSD). Both are read-only, so
    /// every HDD write of the last two phases is the migrator's. With clean
    /// HDD shadows, demoting an extent unchanged since its promotion is a
    /// mapping change, so neither the shift nor the return should write the
    /// HDD at all. The suite first trims a quarter of the volume (away from
    /// the other suites' regions) so the HDD has slots to keep shadows in:
    /// a full volume has none (capacity = SSD + HDD - reserve leaves the
    /// reserve as the only free space).
    pub(super) fn return_(&mut self) {
        let Some(vol) = self.targets[0].volume().cloned() else {
            return;
        };
        let es = self.extent_size;
        let quarter = self.capacity / 4 / es * es;
        if self.targets[0].trim(0, quarter).is_err() || vol.flush().is_err() {
            return;
        }
        // Each set 0.6x the SSD: the two do not fit together (the SSD less
        // the reserve is 0.75x), so B displaces most of A and A most of B.
        let mut a = self.zipf_spec(0.6);
        a.read = 1.0;
        let mut b = a.clone();
        // B next to A, both inside what the HDD alone holds.
        b.start = (a.start + a.len).min(self.capacity.min(self.hdd_size) - a.len) / es * es;
        self.progress("return: warming set A");
        self.warm_until_stable(&a, 0);
        // A pause: pre-cleaning gives SSD data with no HDD copy one.
        let pre = PhaseCost::of(&vol);
        self.progress("return: a minute idle");
        self.idle(60.0);
        let precleaned = tierd::volume::Stats::get(&vol.stats().precleaned);
        let idle_cost = PhaseCost::of(&vol).since(pre);
        let share_a = self.ssd_share(a.start, a.len).unwrap_or(0.0);
        // A's SSD extents with a clean HDD copy: the ones whose demotion
        // costs no write.
        let bpe = vol.geometry().blocks_per_extent();
        let (mut on, mut clean) = (0u64, 0u64);
        for e in a.start / es..(a.start + a.len) / es {
            if let Some(m) = vol.mapping(e).filter(|m| m.loc.tier == Tier::Ssd) {
                on += 1;
                if m.shadow.is_some_and(|sh| sh.stale.count(bpe) == 0) {
                    clean += 1;
                }
            }
        }
        let p0 = PhaseCost::of(&vol);
        self.progress("return: warming set B");
        self.warm_until_on_ssd(&b);
        let p1 = PhaseCost::of(&vol);
        self.progress("return: set A again");
        let t = self.warm_until_on_ssd(&a);
        let p2 = PhaseCost::of(&vol);
        let back = self.ssd_share(a.start, a.len).unwrap_or(0.0);
        let (away, ret) = (p1.since(p0), p2.since(p1));
        let n = a.len / es;
        for (name, c) in [("away", away), ("return", ret)] {
            self.finding_against(
                "return",
                &format!("{name}-hdd-write-MiB"),
                c.hdd_write_bytes as f64 / MIB as f64,
                "MiB",
                format!(
                    "HDD writes while the hot set {} ({} demotions, {} of them mapping changes \
                     with no copy)",
                    if name == "away" {
                        "moves to B"
                    } else {
                        "returns to A"
                    },
                    c.demotions,
                    c.free_demotions
                ),
                Goal::AtMost(0.0),
            );
            self.finding(
                "return",
                &format!("{name}-free-demotions"),
                c.free_demotions as f64,
                "extents",
                format!("of {} demotions", c.demotions),
            );
        }
        self.finding(
            "return",
            "idle-precleaned-MiB",
            idle_cost.hdd_write_bytes as f64 / MIB as f64,
            "MiB",
            format!(
                "HDD writes of a minute idle after A warmed: pre-cleaning ({precleaned} \
                 extents given an HDD copy so far)"
            ),
        );
        self.finding(
            "return",
            "a-clean-shadow-share",
            clean as f64 / on.max(1) as f64,
            "share",
            format!(
                "{clean} of set A's {on} SSD extents had a clean HDD copy before B came, \
                 after the pause \
                 (their demotion is a mapping change); other demotions are of data \
                 promoted while the volume had no free HDD slot (earlier suites' sets)"
            ),
        );
        self.finding(
            "return",
            "a-on-ssd-after-return",
            back,
            "share",
            format!(
                "{n} extents of set A on the SSD after {t:.0} s back ({:.0} % before it left)",
                share_a * 100.0
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{landing_split, LandingSplit};

    #[test]
    fn the_split_falls_inside_the_bin_where_the_reserve_is_reached() {
        // 10 MiB per 0.1 s bin for 3 bins, then 1 MiB per bin; the last
        // bin is partial and left out. 25 MiB land at 0.25 s.
        let series = [10, 10, 10, 1, 1, 1, 1, 7];
        let s = landing_split(&series, 0.1, 1.0, 25.0);
        let first = s.first.expect("reached");
        assert!((first - 100.0).abs() < 1e-9, "{first}");
        // 34 - 25 = 9 MiB over 0.7 - 0.25 = 0.45 s.
        let after = s.after.expect("time left");
        assert!((after - 20.0).abs() < 1e-9, "{after}");
        assert_eq!(
            landing_split(&series, 0.1, 1.0, 1000.0),
            LandingSplit {
                first: None,
                after: None
            }
        );
    }
}
