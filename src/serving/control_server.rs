//! The control server: answers the control requests of
//! [`crate::control`] (the messages `tierctl` shares with the daemon), one
//! JSON line each, on the control socket that [`super::endpoints`] bound,
//! against the daemon's [`Live`] state and its [`Settings`].

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, info};

use super::live::Live;
use super::settings::Settings;
use crate::control::{
    Ack, ByteRun, Cells, Explain, MigrateAction, PlacementMap, Request, Response, Run, SsdOnlyMap,
    TopEntry, TopOrder, Where, MAX_LINE,
};
use crate::listen::{self, Drain, LoopOptions};
use crate::migrate::candidates::all_candidates;
use crate::migrate::policy::effective;
use crate::units::human_bytes;
use crate::volume::{Stats, Tier};

/// Answer control connections until `shutdown` completes.
pub async fn serve(
    listener: UnixListener,
    live: Arc<Live>,
    settings: Option<Arc<Settings>>,
    shutdown: impl Future<Output = ()>,
) {
    let opts = LoopOptions {
        what: "control",
        limit: None,
        drain: Drain::Abort,
    };
    listen::serve(listener, opts, shutdown, |stream, _, _| {
        let (live, settings) = (live.clone(), settings.clone());
        async move {
            if let Err(e) = connection(stream, live, settings).await {
                debug!("control connection ended: {e}");
            }
        }
    })
    .await;
}

async fn connection(
    stream: UnixStream,
    live: Arc<Live>,
    settings: Option<Arc<Settings>>,
) -> std::io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut rd)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let resp = if line.len() > MAX_LINE {
            let r = Response::err(format!("request longer than {MAX_LINE} bytes"));
            write_response(&mut wr, &r).await?;
            return Ok(());
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            match Request::parse(&line) {
                Ok(req) => handle(&live, &settings, req).await,
                Err(e) => Response::err(e.to_string()),
            }
        };
        write_response(&mut wr, &resp).await?;
    }
}

async fn write_response(
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    resp: &Response,
) -> std::io::Result<()> {
    let mut out = serde_json::to_vec(resp).map_err(std::io::Error::other)?;
    out.push(b'\n');
    wr.write_all(&out).await
}

/// Answer one request (volume work runs on a blocking thread).
async fn handle(live: &Arc<Live>, settings: &Option<Arc<Settings>>, req: Request) -> Response {
    let (l, st) = (live.clone(), settings.clone());
    match tokio::task::spawn_blocking(move || handle_blocking(&l, st.as_deref(), req)).await {
        Ok(r) => r,
        Err(e) => Response::err(format!("internal error: {e}")),
    }
}

fn handle_blocking(live: &Live, settings: Option<&Settings>, req: Request) -> Response {
    let vol = &live.volume;
    let es = vol.geometry().extent_size;
    match req {
        Request::Status => {
            let mut status = live.status();
            status.evacuation = settings.and_then(|st| st.evacuation(live));
            Response::ok(status)
        }
        Request::Placement { offset, len, cells } => match clip(offset, len, vol.size()) {
            Ok(r) => Response::ok(placement(live, r.offset, r.end - r.offset, cells)),
            Err(e) => Response::err(e),
        },
        Request::SsdOnly {
            offset,
            len,
            max_runs,
        } => match clip(offset, len, vol.size()) {
            Ok(r) => {
                let got = vol.ssd_only_ranges(r.offset, r.end - r.offset, max_runs);
                let (lost, lost_truncated) = vol.lost_ranges(r.offset, r.end - r.offset, max_runs);
                let (all_lost, _) = vol.lost_ranges(r.offset, r.end - r.offset, usize::MAX);
                Response::ok(SsdOnlyMap {
                    lost_bytes: all_lost.iter().map(|&(_, l)| l).sum(),
                    lost: lost
                        .into_iter()
                        .map(|(offset, len)| ByteRun { offset, len })
                        .collect(),
                    lost_truncated,
                    offset: r.offset,
                    len: r.end - r.offset,
                    runs: got
                        .runs
                        .iter()
                        .map(|&(offset, len)| ByteRun { offset, len })
                        .collect(),
                    bytes: got.bytes,
                    truncated: got.truncated,
                    ssd_errors: Stats::get(&vol.stats().dev_errors[Tier::Ssd.index()]),
                })
            }
            Err(e) => Response::err(e),
        },
        Request::Explain { offset } => {
            let Some(p) = vol.explain(offset / es) else {
                return Response::err(format!(
                    "offset {} is outside the volume ({})",
                    human_bytes(offset),
                    human_bytes(vol.size())
                ));
            };
            let why = match (p.pin, p.tier, p.last_move) {
                (_, None, _) => "not mapped: never written or trimmed; reads return zeros".into(),
                (Some(pin), Some(t), _) if pin == t => format!("pinned to the {pin}"),
                (Some(pin), Some(t), _) => {
                    format!("pinned to the {pin}, still on the {t}: the migrator moves it when there is room")
                }
                (None, Some(t), Some(m)) => {
                    format!("moved to the {t} ({} migration)", m.reason.name())
                }
                (None, Some(t), None) => format!(
                    "on the {t} since it was first written (or since start); heat {:.2}",
                    p.score
                ),
            };
            Response::ok(Explain { placement: p, why })
        }
        Request::Top { order, n } => {
            let policy = live.migrator.config().policy;
            let bpe = vol.geometry().blocks_per_extent();
            // Every mapped extent (the coldest are untouched ones): a walk
            // of the whole map, on the operator's request.
            let mut c: Vec<_> = all_candidates(vol, &live.heat)
                .into_iter()
                .map(|c| (effective(&policy, &c, bpe), c))
                .collect();
            c.sort_by(|a, b| {
                let o = a.0.total_cmp(&b.0).then(a.1.extent.cmp(&b.1.extent));
                match order {
                    TopOrder::Cold => o,
                    TopOrder::Hot => o.reverse(),
                }
            });
            let top: Vec<TopEntry> = c
                .into_iter()
                .take(n)
                .map(|(heat, c)| TopEntry {
                    extent: c.extent,
                    offset: c.extent * es,
                    tier: c.tier,
                    score: c.score,
                    heat,
                    coverage: c.coverage,
                    pin: c.pin,
                })
                .collect();
            Response::ok(top)
        }
        Request::Pin { offset, len, tier } => pin(live, offset, len, Some(tier)),
        Request::Unpin { offset, len } => pin(live, offset, len, None),
        Request::Migrate { action } => {
            let m = &live.migrator;
            let done = match action {
                MigrateAction::Pause => {
                    m.set_paused(true);
                    info!("migration paused by the operator");
                    "migration paused".to_string()
                }
                MigrateAction::Resume => {
                    m.set_paused(false);
                    live.wake();
                    info!("migration resumed by the operator");
                    "migration resumed".to_string()
                }
                MigrateAction::Now => {
                    if m.paused() {
                        return Response::err(
                            "migration is paused: run `tierctl migrate resume` first",
                        );
                    }
                    if live.wake() {
                        "migration round started".to_string()
                    } else {
                        // No background thread (migrate.enabled = false):
                        // run one round here.
                        let r = m.run_round();
                        format!(
                            "ran one round: {} planned, {} moved ({})",
                            r.planned,
                            r.moved,
                            human_bytes(r.bytes)
                        )
                    }
                }
            };
            ack(live, done)
        }
        Request::Reserve { bytes } => {
            let ssd = u64::from(vol.geometry().ssd_slots);
            let extents = bytes.div_ceil(es);
            if extents > ssd {
                return Response::err(format!(
                    "reserve {} is more than the SSD's {} of extent slots",
                    human_bytes(bytes),
                    human_bytes(ssd * es)
                ));
            }
            let Some(settings) = settings else {
                live.migrator.set_reserve_extents(extents);
                live.wake();
                return ack(
                    live,
                    format!(
                        "reserve target set to {} (not saved)",
                        human_bytes(extents * es)
                    ),
                );
            };
            match settings.set(live, "reserve", &(extents * es).to_string()) {
                Ok(_) => ack(
                    live,
                    format!("reserve target set to {}; saved", human_bytes(extents * es)),
                ),
                Err(e) => Response::err(e),
            }
        }
        Request::ConfigShow => match settings {
            Some(s) => {
                let mut rows = s.show();
                // No reserve setting: the volume's own, fixed at format, is
                // in force.
                if let Some(r) = rows
                    .iter_mut()
                    .find(|r| r.key == "reserve" && r.value.is_empty())
                {
                    let geo = vol.geometry();
                    r.value =
                        crate::units::ByteSize(u64::from(geo.reserve_extents) * es).to_string();
                }
                Response::ok(rows)
            }
            None => no_settings(),
        },
        Request::ConfigSet { key, value } => match settings {
            Some(s) => match s.set(live, &key, &value) {
                Ok(done) => ack(live, done),
                Err(e) => Response::err(e),
            },
            None => no_settings(),
        },
        Request::ConfigReset { key } => match settings {
            Some(s) => match s.reset(live, &key) {
                Ok(done) => ack(live, done),
                Err(e) => Response::err(e),
            },
            None => no_settings(),
        },
        Request::Evacuate { tier, dry_run } => {
            if dry_run {
                return match tier {
                    Some(t) => Response::ok(super::evacuation::plan(live, t)),
                    None => Response::err("a plan needs a tier: ssd or hdd"),
                };
            }
            match settings {
                Some(s) => match s.evacuate(live, tier) {
                    Ok(done) => ack(live, done),
                    Err(e) => Response::err(e),
                },
                None => no_settings(),
            }
        }
        Request::ReplaceSsd { path, force } => {
            let cfg = match settings {
                Some(s) => s.config(),
                None => return no_settings(),
            };
            match super::open::replace_ssd(&live.volume, &cfg, &path, force) {
                Ok(done) => ack(live, done),
                Err(e) => Response::err(e),
            }
        }
        Request::TraceStart {
            path,
            max_bytes,
            force,
        } => match live
            .recorder
            .start(&path, max_bytes.unwrap_or(0), force, vol.size())
        {
            Ok(s) => Response::ok(s),
            Err(e) => Response::err(e.to_string()),
        },
        Request::TraceStop => match live.recorder.stop() {
            Ok(s) => Response::ok(s),
            Err(e) => Response::err(e.to_string()),
        },
        Request::TraceStatus => Response::ok(live.recorder.status()),
        Request::Reload => match settings {
            Some(s) => {
                let r = super::systemd::reload(live, s);
                match r {
                    Ok(done) => ack(live, done),
                    Err(e) => Response::err(e),
                }
            }
            None => no_settings(),
        },
    }
}

fn no_settings() -> Response {
    Response::err("this daemon keeps no live settings")
}

fn ack(live: &Live, done: String) -> Response {
    Response::ok(Ack {
        done,
        paused: live.migrator.paused(),
        reserve_target_bytes: live.migrator.reserve_extents() * live.volume.geometry().extent_size,
    })
}

fn pin(live: &Live, offset: u64, len: Option<u64>, tier: Option<Tier>) -> Response {
    let size = live.volume.size();
    let r = match clip(offset, len, size) {
        Ok(r) => r,
        Err(e) => return Response::err(e),
    };
    if let Err(e) = live.volume.pin(r.offset, r.end - r.offset, tier) {
        return Response::err(e.to_string());
    }
    // Honour the pin now rather than at the next interval.
    live.wake();
    let what = pin_message(&r, size, tier);
    info!("{what} (by the operator)");
    ack(live, what)
}

/// What a pin or an unpin did, in one sentence: the range and the tier
/// first, then whether the range had to be clipped.
fn pin_message(r: &Clipped, size: u64, tier: Option<Tier>) -> String {
    let mut s = match tier {
        Some(t) => format!("pinned {} to the {t}", r.describe(size)),
        None => format!("unpinned {}", r.describe(size)),
    };
    if r.clipped {
        s.push_str(&format!(
            "; the range asked for ran past the end of the volume and was clipped to its end, {} ({size} bytes)",
            human_bytes(size)
        ));
    }
    s
}

/// A byte range of the volume as asked for, clipped to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clipped {
    offset: u64,
    /// Exclusive end, at most the volume's size.
    end: u64,
    /// The range asked for ran past the end of the volume.
    clipped: bool,
}

impl Clipped {
    /// The range for a person: `0 B-35.00 GiB (the whole volume)`.
    fn describe(&self, size: u64) -> String {
        let mut s = format!("{}-{}", human_bytes(self.offset), human_bytes(self.end));
        if self.offset == 0 && self.end == size {
            s.push_str(" (the whole volume)");
        }
        s
    }
}

/// `[offset, offset+len)` clipped to a volume of `size` bytes (`len`
/// absent: to the end). A range that starts past the end, or is empty, is
/// an error that says what the volume holds.
fn clip(offset: u64, len: Option<u64>, size: u64) -> Result<Clipped, String> {
    if len == Some(0) {
        return Err("empty range: give a length, e.g. 0-1GiB, 4GiB+512MiB or all".into());
    }
    if offset >= size {
        return Err(format!(
            "range starts at {} ({offset} bytes), at or past the end of the volume ({}, {size} bytes)",
            human_bytes(offset),
            human_bytes(size)
        ));
    }
    let want = len.map_or(size, |l| offset.saturating_add(l));
    Ok(Clipped {
        offset,
        end: want.min(size),
        clipped: want > size,
    })
}

/// Runs of whole extents over `[offset, offset+len)`, or with `cells`
/// that many cells of counts (at most one cell per extent).
fn placement(live: &Live, offset: u64, len: u64, cells: Option<u32>) -> PlacementMap {
    let vol = &live.volume;
    let es = vol.geometry().extent_size;
    let (first, end) = (offset / es, (offset + len).div_ceil(es));
    let mut runs: Vec<Run> = Vec::new();
    let mut counted = cells.map(|n| {
        let per = (end - first).div_ceil(u64::from(n.max(1))).max(1);
        Cells {
            per_cell: per,
            counts: vec![[0u64; 3]; (end - first).div_ceil(per) as usize],
        }
    });
    for e in first..end {
        let at = Where::from(vol.tier_of(e));
        if let Some(c) = counted.as_mut() {
            let k = match at {
                Where::Ssd => 0,
                Where::Hdd => 1,
                Where::Unmapped => 2,
            };
            c.counts[((e - first) / c.per_cell) as usize][k] += 1;
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.at == at => r.len += es,
            _ => runs.push(Run {
                offset: e * es,
                len: es,
                at,
            }),
        }
    }
    PlacementMap {
        offset,
        len,
        extent_size: es,
        capacity_bytes: vol.size(),
        runs,
        cells: counted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    /// What `status` prints as `35.00 GiB (37578866688 bytes)`.
    const SIZE: u64 = 37_578_866_688;

    #[test]
    fn a_range_past_the_end_is_clipped_and_says_so() {
        let r = clip(0, Some(35 * GIB), SIZE).expect("0-35GiB is taken");
        assert_eq!((r.offset, r.end, r.clipped), (0, SIZE, true));
        let text = pin_message(&r, SIZE, Some(Tier::Ssd));
        assert!(text.contains("the whole volume"), "{text}");
        assert!(text.contains("past the end"), "{text}");
        let r = clip(GIB, Some(GIB), SIZE).expect("inside");
        assert_eq!((r.offset, r.end, r.clipped), (GIB, 2 * GIB, false));
        assert!(!pin_message(&r, SIZE, None).contains("past the end"));
        let all = clip(0, None, SIZE).expect("all");
        assert_eq!((all.end, all.clipped), (SIZE, false));
        assert_eq!(all.describe(SIZE), "0 B-35.00 GiB (the whole volume)");
        let e = clip(SIZE, Some(1), SIZE).expect_err("starts at the end");
        assert!(e.contains("past the end") && e.contains("35.00 GiB"), "{e}");
        assert!(clip(0, Some(0), SIZE).is_err());
        let r = clip(1, Some(u64::MAX), SIZE).expect("huge length");
        assert_eq!((r.end, r.clipped), (SIZE, true));
    }

    #[test]
    fn a_clipped_pin_names_range_and_tier_together() {
        let r = clip(34 * GIB, Some(2 * GIB), SIZE).expect("34GiB+2GiB is taken");
        assert_eq!(
            pin_message(&r, SIZE, Some(Tier::Ssd)),
            "pinned 34.00 GiB-35.00 GiB to the ssd; the range asked for ran past the end of the volume \
             and was clipped to its end, 35.00 GiB (37578866688 bytes)"
        );
        assert_eq!(
            pin_message(&r, SIZE, None),
            "unpinned 34.00 GiB-35.00 GiB; the range asked for ran past the end of the volume \
             and was clipped to its end, 35.00 GiB (37578866688 bytes)"
        );
    }
}
