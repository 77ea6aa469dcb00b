//! One migration round ([`Migrator::run_round`]): tick the heat map, list
//! the candidates and plan the round's moves (`super::super::policy`), then
//! carry them out batch by batch (paced, backing off while users need the
//! devices, paid from the ledger's budget while users are on the HDD), and
//! finish with the round's upkeep (`super::upkeep`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, warn};

use super::super::candidates::candidates;
use super::super::pay::Allowance;
use super::super::policy::{plan_round, PlanInput};
use super::{migration_budget, written_bytes, Migrator, RoundReport, SPECULATIVE_BATCH};
use crate::device::IoClass;
use crate::units::Reason;
use crate::volume::{MoveOutcome, Stats, Tier};

impl Migrator {
    /// One round: tick heat, plan, move. Pacing and backing off wait with
    /// the volume's clock ([`crate::clock::Clock::sleep`]). Pausing ends a
    /// round early, between batches.
    pub fn run_round(&self) -> RoundReport {
        // Whatever thread runs it, a round's device I/O is background I/O.
        let _class = IoClass::Background.enter();
        let cfg = self.config();
        let vol = &self.vol;
        vol.set_admission(cfg.admission);
        vol.set_busy_latency(cfg.busy_latency);
        vol.ledger().set_shares(
            cfg.admission.then_some(cfg.admission_share),
            cfg.promote_share,
        );
        // What admission left waiting (no admitting thread, or a burst).
        if cfg.admission && !self.paused() {
            if let Err(e) = super::super::admit::admit_pending(vol) {
                warn!("admission: {e}");
            }
        }
        let now = vol.clock().now();
        self.heat.tick(now);
        self.rounds.fetch_add(1, Ordering::Relaxed);
        // Recent foreground write rate, for the reserve's pace.
        let write_rate = {
            let mut last = self.last_written.lock();
            let w = written_bytes(vol);
            let dt = now.saturating_sub(last.1).as_secs_f64();
            let rate = if dt > 0.0 {
                (w.saturating_sub(last.0)) as f64 / dt
            } else {
                0.0
            };
            *last = (w, now);
            rate
        };
        // A remote capacity tier's link, as measured, sizes the budget.
        let link = vol.hdd_link();
        {
            let mut bucket = self.bucket.lock();
            bucket.set_rate(migration_budget(cfg.bandwidth.0, link.as_ref()));
            *self.link.lock() = link;
        }
        {
            let boosted = (cfg.reserve_boost * write_rate) as u64;
            let rate = if cfg.bandwidth.0 == 0 {
                0
            } else {
                cfg.bandwidth.0.max(boosted)
            };
            self.reserve_bucket.lock().set_rate(rate);
        }
        let mut report = RoundReport::default();
        if self.paused() {
            return report;
        }
        let geo = *vol.geometry();
        // Shadows give way when the HDD runs short of free slots (demotions
        // and new data need them): keep more free than the reserve target.
        let spare = self.reserve_extents().max(1);
        let hdd_free = u64::from(vol.free_slots(Tier::Hdd));
        if hdd_free <= spare {
            match vol.drop_shadows((spare + 1 - hdd_free) as usize, None) {
                Ok(n) => report.shadows_dropped = n,
                Err(e) => warn!("dropping shadows: {e}"),
            }
        }
        if let Some(from) = vol.evacuating() {
            // Draining a tier replaces the policy: everything on it moves
            // to the other tier as room allows.
            self.evacuate(from, &cfg, &mut report);
            if !self.paused() {
                self.write_back(&cfg, &mut report);
            }
            return report;
        }
        // Reads place their data themselves while admission keeps copies
        // (a cache's rule); on a full HDD heat decides.
        let admitting = cfg.admission && vol.admission_keeps_copies();
        let following = std::mem::take(&mut *self.following.lock());
        let input = PlanInput {
            // The extents that can move: what the SSD holds, what was
            // touched, what is pinned, and, with prefetch, the busy zones
            // (with admission too: a set arriving is prefetched).
            candidates: candidates(vol, &self.heat, Some(&cfg.policy), &following),
            // The write log's segments are not free: random writes can fill
            // them faster than the HDD drains them (a minute or more for a
            // reserve's worth of scattered 4 KiB blocks), and the reserve
            // must be there for the next burst of new data.
            ssd_free: u64::from(vol.free_slots(Tier::Ssd)),
            reserve: self.reserve_extents(),
            blocks_per_extent: geo.blocks_per_extent(),
            group: cfg.batch.max(1),
            protect: (write_rate * cfg.reserve_horizon.as_secs_f64() / geo.extent_size as f64)
                .ceil() as u64,
            // A promotion keeps its HDD copy while the HDD has more free
            // slots than the reserve (see `Volume::migrate_batch`).
            shadows: vol.shadows_enabled() && hdd_free > 2 * spare,
            admission: admitting,
            following,
        };
        let (moves, arrivals) = plan_round(&cfg.policy, &input);
        // The arrivals this round saw, followed through in the next (only
        // while admission is on: without it every busy zone is prefetched).
        if admitting {
            *self.following.lock() = arrivals;
        }
        report.planned = moves.len();
        report.truncated = moves.len() >= cfg.policy.max_moves;
        let p = &self.progress;
        p.planned.fetch_add(moves.len() as u64, Ordering::Relaxed);
        p.last_planned.store(moves.len() as u64, Ordering::Relaxed);
        p.queued.store(moves.len() as u64, Ordering::Relaxed);
        p.more_waiting.store(report.truncated, Ordering::Relaxed);
        // Consecutive moves in one direction and for one bucket go as a
        // batch: one destination sync and one flush, neighbours merged.
        let mut k = 0;
        while k < moves.len() {
            if self.paused() {
                break;
            }
            let first = moves[k];
            let reserve = first.reason == Reason::Reserve;
            // Speculative moves go a few at a time, each group only while
            // the HDD is free of users: one that starts just before users
            // come back holds them up for a few extents' copy at most.
            let most = if first.speculative {
                cfg.batch.clamp(1, SPECULATIVE_BATCH)
            } else {
                cfg.batch.max(1)
            };
            let mut n = 1;
            while k + n < moves.len()
                && n < most
                && moves[k + n].to == first.to
                && (moves[k + n].reason == Reason::Reserve) == reserve
                && moves[k + n].speculative == first.speculative
            {
                n += 1;
            }
            // Work that waits is planned again next round:
            // - a refill of the reserve while new data lands: it would take
            //   SSD time from writes landing at flash speed (a refill reads
            //   the data it moves), and once the reserve is gone, HDD time
            //   from writes spilling past it, for nothing: the burst's data
            //   reaches the HDD either way, and the refill only adds a read
            //   and seeks. The reserve refills once writes of new data pause
            //   (Fusion Drive keeps its 4 GB free the same way, after the
            //   burst);
            // - a guess while users keep the HDD busy.
            let landing = reserve && self.vol.new_data_idle() < cfg.speculative_idle;
            if landing || (first.speculative && !self.hdd_free_of_users(&cfg)) {
                report.deferred += n;
                p.queued.fetch_sub(n as u64, Ordering::Relaxed);
                k += n;
                continue;
            }
            // Promotions, and the swaps making room for them, go as far as
            // the HDD time they may spend (`super::pay`); the rest is
            // planned again next round.
            // (With the share at 1 there is no budget: they go as planned.)
            let placement = cfg.promote_share < 1.0
                && matches!(
                    first.reason,
                    Reason::Hot | Reason::Near | Reason::Cold | Reason::Idle
                );
            let mut chosen: Option<Vec<(u64, Reason)>> = None;
            let budgeted = placement && !self.hdd_free_of_users(&cfg);
            if placement && !budgeted {
                n = super::super::pay::first_run(vol, &moves[k..k + n]);
            }
            if budgeted {
                let allow = Allowance::new(
                    vol.ledger().placement_budget(),
                    self.move_cost.load(Ordering::Relaxed) as f64 / 1e9,
                    vol.ledger().hdd_service_time().as_secs_f64(),
                );
                let go = super::super::pay::select(vol, &self.heat, &moves[k..k + n], allow);
                let left = n - go.len();
                report.deferred += left;
                report.paced += left;
                Stats::add(&vol.stats().promotions_paced, left as u64);
                p.queued.fetch_sub(left as u64, Ordering::Relaxed);
                if go.is_empty() {
                    k += n;
                    continue;
                }
                chosen = Some(go);
            }
            let batch: Vec<(u64, Reason)> = chosen.unwrap_or_else(|| {
                moves[k..k + n]
                    .iter()
                    .map(|m| (m.extent, m.reason))
                    .collect()
            });
            k += n;
            // Yield to foreground I/O: many requests in flight, or HDD reads
            // already slow (every move reads or writes the HDD). Moves for
            // the data in use (promotions and the demotions that make room
            // for them) do not wait for slow HDD reads: the foreground's
            // HDD reads are slow because that data is still on the HDD
            // (waiting held promotions of a moved working set to 32 MiB/s,
            // benchmarks/daemon-shift.sh).
            let for_use = matches!(
                first.reason,
                Reason::Hot | Reason::Near | Reason::Pin | Reason::Cold | Reason::Idle
            );
            // The other moves yield to a user's stream of writes to the
            // HDD as well, before the batch and between its copies
            // (`Migrator::hdd_streaming`).
            let busy = || {
                vol.inflight() >= cfg.busy_inflight
                    || (!for_use && (vol.hdd_congested() || self.hdd_streaming(&cfg)))
            };
            self.back_off(busy, cfg.max_backoff);
            let bucket = if reserve {
                &self.reserve_bucket
            } else {
                &self.bucket
            };
            let mut waited = Duration::ZERO;
            let mut pace = |n: u64| {
                if !for_use {
                    self.yield_to_streams(&cfg);
                }
                waited += self.pace(bucket, n);
            };
            let t0 = vol.clock().io_now();
            let _awaited = for_use.then(crate::volume::AwaitedCopies::enter);
            // While admitted extents keep their HDD copies, the reserve is
            // covered by cleaning, not by demoting: an extent given a clean
            // copy stays on the SSD and still leaves by a mapping change the
            // moment a write needs its slot, where a demotion would bring it
            // back by a copy if it is read again.
            let result = if reserve
                && first.to == Tier::Hdd
                && cfg.admission
                && vol.admission_keeps_copies()
            {
                super::super::copy::clean_batch(vol, &batch, &mut pace)
            } else {
                super::super::copy::migrate_batch(vol, &batch, first.to, &mut pace)
            };
            if budgeted {
                // The batch's device time: its span less the bandwidth
                // cap's waits.
                let took = vol
                    .clock()
                    .io_now()
                    .saturating_sub(t0)
                    .saturating_sub(waited);
                vol.ledger().placement_spent(took);
                let moved = result.as_ref().map_or(0, |o| {
                    o.iter()
                        .filter(|(_, o)| matches!(o, MoveOutcome::Moved(_)))
                        .count()
                });
                if moved > 0 {
                    // A smoothed cost per move sizes the next batches.
                    let per = took.as_nanos() as u64 / moved as u64;
                    let old = self.move_cost.load(Ordering::Relaxed);
                    self.move_cost
                        .store(old - old / 4 + per / 4, Ordering::Relaxed);
                }
            }
            p.queued.fetch_sub(batch.len() as u64, Ordering::Relaxed);
            match result {
                Ok(outcomes) => {
                    for (extent, o) in outcomes {
                        match o {
                            MoveOutcome::Moved(bytes) => {
                                report.moved += 1;
                                report.bytes += bytes;
                                // The reason is looked up only when the
                                // line is logged (tracing evaluates fields
                                // behind its level check).
                                debug!(
                                    extent,
                                    to = %first.to,
                                    reason = batch
                                        .iter()
                                        .find(|(e, _)| *e == extent)
                                        .map_or(first.reason, |(_, r)| *r)
                                        .name(),
                                    bytes,
                                    "moved"
                                );
                            }
                            MoveOutcome::Raced => report.raced += 1,
                            _ => report.skipped += 1,
                        }
                    }
                }
                Err(e) => {
                    report.errors += batch.len();
                    warn!(extents = batch.len(), to = %first.to, "migration failed, extents left in place: {e}");
                }
            }
        }
        if !self.paused() {
            self.keep_exposure(&cfg, &mut report);
        }
        if !self.paused() {
            self.write_back(&cfg, &mut report);
        }
        // Pre-cleaning while no write arrives; each batch also waits for
        // the HDD to be free of users (`preclean_batch`). Reads the SSD
        // serves alone do not hold it: a set read from flash since it was
        // written never got its copies, and each of its later evictions
        // wrote it down beside the users' misses.
        let quiet = write_rate < 1.0;
        if !self.paused() && quiet && report.moved + report.written_back + report.covered == 0 {
            self.preclean(&cfg, &mut report);
        }
        report
    }
}
