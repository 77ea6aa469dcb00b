//! Write-back beside users while the write log is pressed
//! (`Volume::log_pressed`): the thread that watches for it
//! (`tierd-logpress`), the look itself, and the groups it runs. Methods of
//! [`Migrator`]; the round runs the same where no thread is spawned.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::error;

use super::super::copy;
use super::super::knobs::MigrateConfig;
use super::upkeep::tally;
use super::{Migrator, RoundReport};
use crate::device::IoClass;

/// How often the write-back thread looks whether the log is pressed
/// (`Migrator::pressed_main`).
const PRESSED_POLL: Duration = Duration::from_millis(20);

impl Migrator {
    /// The write-back thread: while the write log is pressed, writes it
    /// back beside users ([`Migrator::write_back_pressed`]), looking every
    /// [`PRESSED_POLL`] (real time) otherwise. A thread of its own, as
    /// bcache's write-back is: inside the round it waited for placement's
    /// moves, which back off for the very load that fills the log (through
    /// the daemon, the first 30 s of a sustained load sent 95 writes a
    /// second in place, the round busy elsewhere). The round still runs it
    /// too, where no thread is spawned (the bench's virtual clock); one of
    /// them at a time.
    pub(super) fn pressed_main(&self, stop: &std::sync::atomic::AtomicBool) {
        let _class = IoClass::Background.enter();
        while !stop.load(Ordering::Relaxed) {
            let cfg = self.config();
            if cfg.enabled && !self.paused() && self.vol.evacuating().is_none() {
                let mut report = RoundReport::default();
                let ran = catch_unwind(AssertUnwindSafe(|| {
                    self.write_back_if_pressed(&cfg, &mut report)
                }));
                match ran {
                    Ok(true) if report.written_back + report.raced > 0 => continue,
                    Ok(_) => {}
                    Err(_) => error!("write-back beside users panicked; it goes on"),
                }
            }
            std::thread::sleep(PRESSED_POLL);
        }
    }

    /// Write back beside users if the log is pressed (and say whether it
    /// was); an empty log is not.
    pub(super) fn write_back_if_pressed(
        &self,
        cfg: &MigrateConfig,
        report: &mut RoundReport,
    ) -> bool {
        if self.vol.log_usage().used == 0 {
            self.vol.log_unpress();
            return false;
        }
        if !self.log_pressed(cfg) {
            return false;
        }
        self.write_back_pressed(cfg, report);
        true
    }

    /// Whether the write log is pressed ([`crate::volume::Volume::log_pressed`]:
    /// over its band while no user has read from the HDD for
    /// `speculative-idle`).
    fn log_pressed(&self, cfg: &MigrateConfig) -> bool {
        let quiet =
            cfg.speculative_idle.is_zero() || self.vol.hdd_reads_idle() >= cfg.speculative_idle;
        let p = self.vol.log_pressed(quiet);
        if !p {
            *self.pressed_end.lock() = None;
        }
        p
    }

    /// Write-back beside users while the log is pressed: three quarters
    /// full, or writes waiting for its room (`Volume::await_log_room`),
    /// until it is back below half. Under a sustained load of writes to
    /// HDD data the HDD is never free of users, and with write-back only
    /// in idle time a log that filled once stayed full: every later write
    /// went in place, a seek each. Written back, the same blocks go down
    /// in HDD order, the extents with the most logged blocks first (the
    /// most room for each positioning, a span merging what lies close),
    /// and the writes waiting for that room come back at flash speed. So
    /// the HDD's time goes to write-back while the log is pressed, groups
    /// one after the other for up to a round's interval (the next round
    /// follows at once), paced by the reserve's bucket. Users' reads come
    /// first: a read on the HDD ends the pressure (looked at before each
    /// group), and a write that finds no room then goes in place at once;
    /// while pressed, it waits no longer than it would have taken in
    /// place, then goes there.
    fn write_back_pressed(&self, cfg: &MigrateConfig, report: &mut RoundReport) {
        let vol = &self.vol;
        let Some(_one) = self.pressed_run.try_lock() else {
            // The other thread is at it.
            return;
        };
        let start = vol.clock().now();
        let group = self
            .write_back_group
            .load(Ordering::Relaxed)
            .clamp(1, cfg.batch.max(1));
        let mut list: Vec<u64> = Vec::new();
        loop {
            // The band's state first: a round that ends on its interval
            // with the log back below half must not leave it pressed.
            if !self.log_pressed(cfg)
                || self.paused()
                || vol.clock().now().saturating_sub(start) >= cfg.interval
            {
                return;
            }
            if list.is_empty() {
                let mut all = vol.logged_extents();
                if all.is_empty() {
                    return;
                }
                // Most logged blocks first (stable: HDD order among equals).
                all.sort_by_key(|e| std::cmp::Reverse(e.1));
                list = all
                    .into_iter()
                    .take(cfg.batch.max(1) * 4)
                    .map(|(e, _)| e)
                    .collect();
            }
            let n = group.min(list.len());
            let mut batch: Vec<u64> = list.drain(..n).collect();
            batch.sort_by_key(|e| vol.loc_of(*e).map(|l| l.slot));
            let mut pace = |n: u64| {
                self.pace(&self.reserve_bucket, n);
            };
            let t0 = vol.clock().now();
            let result = copy::write_back_batch(vol, &batch, &mut pace);
            // Room comes at each group's end: what a waiting write must
            // outlast is the time from one end to the next, the rest of
            // the round in between included (placement's copies, the
            // exposure bound), or the group alone after a pause.
            let end = vol.clock().now();
            let took = end.saturating_sub(t0);
            let since = self.pressed_end.lock().replace(end);
            vol.note_pressed_group(since.map_or(took, |s| end.saturating_sub(s).max(took)));
            tally(
                report,
                result,
                batch.len(),
                |r| &mut r.written_back,
                "write-back beside users (the blocks stay in the log)",
            );
        }
    }
}
