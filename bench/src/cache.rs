//! Caches run on the same drives as the hybrid, as references that pay for
//! their copies: a bcache-like write-back cache and a LARC-like one, each a
//! [`Target`] over its own SSD and HDD (timed by the same models, on the
//! same clock, through the same executor as the hybrid).
//!
//! Both keep every block on the HDD (the HDD is the backing device, its
//! capacity the volume's: the SSD adds none) and hold copies of *pieces*
//! (1 MiB or 256 KiB of the HDD's address space) on the SSD, in LRU order:
//! - **Reads.** A read whose blocks the SSD holds is served there (a hit).
//!   Otherwise the read is served from the HDD (a miss; the blocks the
//!   SSD holds dirty are read from the SSD), and the piece is *admitted*
//!   after the request is answered, when the hybrid's admission at the
//!   miss runs too: the piece is read from the HDD and written to the SSD,
//!   taking the LRU piece's place. A clean victim leaves for free (the HDD
//!   has its blocks); a dirty one is written back first.
//! - **Admission.** `Admit::Miss` (bcache-like) admits every miss;
//!   `Admit::Ghost` (LARC, Huang et al., MSST 2013) only a miss whose piece
//!   its candidate list (a ghost LRU of recently missed pieces, sized
//!   between a tenth and nine tenths of the cache, shrinking on hits and
//!   growing on misses) has seen before; a first miss only enters the list.
//! - **Writes** are absorbed on flash (write-back) at block granularity in
//!   the piece's slot, allocated if needed, and marked dirty; a background
//!   write-back (after a request, one piece at a time, oldest dirty first)
//!   keeps dirty pieces at most a tenth of the cache, as bcache's
//!   `writeback_percent` does.
//! - **Sequential cutoff.** Requests of a stream longer than 4 MiB bypass
//!   the cache (bcache's `sequential_cutoff`): reads are served where the
//!   blocks are and admit nothing, writes go to the HDD and drop the
//!   blocks' copies.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tierd::device::BlockDevice;

use super::sim::list::Lists;
use super::target::{Target, Usage};
use super::workload::Req;

/// Block size the caches track (valid and dirty bits).
const BLOCK: u64 = 4096;

/// Which misses a cache admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Every read miss (bcache-like).
    Miss,
    /// A read miss its ghost list has seen before (LARC-like).
    Ghost,
}

/// A cache's shape.
#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// Bytes per cached piece.
    pub piece: u64,
    /// Admission rule.
    pub admit: Admit,
    /// Requests of a stream past this many bytes bypass the cache.
    pub seq_cutoff: u64,
    /// Dirty pieces the write-back keeps at most, as a share of the cache.
    pub dirty_share: f64,
}

impl CacheConfig {
    /// bcache-like: every miss admitted, in pieces of `piece` bytes.
    pub fn lru(piece: u64) -> Self {
        CacheConfig {
            piece,
            admit: Admit::Miss,
            seq_cutoff: 4 << 20,
            dirty_share: 0.1,
        }
    }

    /// LARC-like: a miss admitted on its second sighting.
    pub fn larc(piece: u64) -> Self {
        CacheConfig {
            admit: Admit::Ghost,
            ..Self::lru(piece)
        }
    }
}

/// The one list of a [`Lists`].
const L: usize = 0;

/// LARC's candidate list: recently missed pieces, LRU, of an adaptive size.
struct Ghost {
    /// Piece -> the stamp of its entry in `order`.
    at: HashMap<u64, u64>,
    /// (stamp, piece), oldest first; entries whose stamp `at` no longer
    /// holds are stale.
    order: VecDeque<(u64, u64)>,
    stamp: u64,
    /// Its size now, and the cache's size, in pieces.
    size: f64,
    cache: f64,
}

impl Ghost {
    fn new(cache: usize) -> Self {
        let cache = cache.max(1) as f64;
        Ghost {
            at: HashMap::new(),
            order: VecDeque::new(),
            stamp: 0,
            size: 0.1 * cache,
            cache,
        }
    }

    /// A hit in the cache: the list shrinks.
    fn on_hit(&mut self) {
        let c = self.cache;
        self.size = (self.size - c / (c - self.size).max(1.0)).max(0.1 * c);
        self.trim();
    }

    /// A miss: the list grows; whether the piece was in it (it leaves it
    /// then, to be admitted), or enters it now.
    fn on_miss(&mut self, piece: u64) -> bool {
        let c = self.cache;
        self.size = (self.size + c / self.size.max(1.0)).min(0.9 * c);
        if self.at.remove(&piece).is_some() {
            return true;
        }
        self.stamp += 1;
        self.at.insert(piece, self.stamp);
        self.order.push_back((self.stamp, piece));
        self.trim();
        false
    }

    fn trim(&mut self) {
        let keep = self.size.max(1.0) as usize;
        while self.at.len() > keep {
            let Some((s, p)) = self.order.pop_front() else {
                break;
            };
            if self.at.get(&p) == Some(&s) {
                self.at.remove(&p);
            }
        }
        // Stale entries beyond twice the live ones are dropped.
        if self.order.len() > 2 * self.at.len() + 64 {
            let at = &self.at;
            self.order.retain(|(s, p)| at.get(p) == Some(s));
        }
    }
}

struct State {
    /// Piece -> slot.
    index: HashMap<u64, usize>,
    /// Slot -> piece (`u64::MAX`: free).
    piece_of: Vec<u64>,
    /// Per slot, `words` words of valid bits and of dirty bits.
    valid: Vec<u64>,
    dirty: Vec<u64>,
    words: usize,
    /// Cached slots, least recently used first.
    lru: Lists,
    /// Dirty slots, dirtied longest ago first.
    dirty_order: Lists,
    free: Vec<usize>,
    /// Pieces to admit once the request is answered.
    pending: Vec<u64>,
    /// Pieces admitted since [`Target::landed`] last asked.
    landed: Vec<u64>,
    ghost: Option<Ghost>,
}

/// Counters of a cache, for [`Usage`].
#[derive(Default)]
struct Counters {
    read_hit: [AtomicU64; 2],
    landed: [AtomicU64; 2],
    moved: AtomicU64,
    ssd_written: AtomicU64,
    admissions: AtomicU64,
}

/// A cache over an SSD and an HDD (see the module docs).
pub struct Cache {
    name: &'static str,
    cfg: CacheConfig,
    ssd: Arc<dyn BlockDevice>,
    hdd: Arc<dyn BlockDevice>,
    st: Mutex<State>,
    c: Counters,
}

/// One run of a request inside one piece.
struct Part {
    piece: u64,
    /// Offset inside the piece, length.
    at: u64,
    len: u64,
}

fn parts(offset: u64, len: u64, piece: u64) -> Vec<Part> {
    let mut out = Vec::new();
    let (mut o, end) = (offset, offset + len);
    while o < end {
        let p = o / piece;
        let stop = ((p + 1) * piece).min(end);
        out.push(Part {
            piece: p,
            at: o - p * piece,
            len: stop - o,
        });
        o = stop;
    }
    out
}

fn bits(words: &[u64], from: usize, to: usize) -> impl Iterator<Item = bool> + '_ {
    (from..to).map(move |b| words[b / 64] >> (b % 64) & 1 == 1)
}

fn set_bits(words: &mut [u64], from: usize, to: usize, on: bool) {
    for b in from..to {
        if on {
            words[b / 64] |= 1 << (b % 64);
        } else {
            words[b / 64] &= !(1 << (b % 64));
        }
    }
}

/// Runs `[from, to)` of set bits among `from..to`.
fn runs(words: &[u64], from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, on) in bits(words, from, to).enumerate() {
        match (on, start) {
            (true, None) => start = Some(from + i),
            (false, Some(s)) => {
                out.push((s, from + i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, to));
    }
    out
}

impl Cache {
    /// A cache named `name` over `ssd` (all of it holds pieces) and `hdd`.
    pub fn new(
        name: &'static str,
        cfg: CacheConfig,
        ssd: Arc<dyn BlockDevice>,
        hdd: Arc<dyn BlockDevice>,
    ) -> Self {
        let slots = (ssd.size() / cfg.piece).max(1) as usize;
        let words = (cfg.piece / BLOCK).div_ceil(64).max(1) as usize;
        Cache {
            name,
            cfg,
            st: Mutex::new(State {
                index: HashMap::new(),
                piece_of: vec![u64::MAX; slots],
                valid: vec![0; slots * words],
                dirty: vec![0; slots * words],
                words,
                lru: Lists::new(slots, 1),
                dirty_order: Lists::new(slots, 1),
                free: (0..slots).rev().collect(),
                pending: Vec::new(),
                landed: Vec::new(),
                ghost: (cfg.admit == Admit::Ghost).then(|| Ghost::new(slots)),
            }),
            ssd,
            hdd,
            c: Counters::default(),
        }
    }

    fn blocks(&self) -> usize {
        (self.cfg.piece / BLOCK) as usize
    }

    fn slot_bytes(&self, slot: usize) -> u64 {
        slot as u64 * self.cfg.piece
    }

    /// Write a slot's dirty blocks back to the HDD (SSD reads, HDD writes,
    /// neighbouring blocks together) and mark them clean.
    fn write_back(&self, st: &mut State, slot: usize) -> io::Result<()> {
        let w = st.words;
        let piece = st.piece_of[slot];
        let runs = runs(&st.dirty[slot * w..(slot + 1) * w], 0, self.blocks());
        for (a, b) in runs {
            let len = ((b - a) as u64 * BLOCK) as usize;
            let mut buf = vec![0u8; len];
            self.ssd
                .read_at(&mut buf, self.slot_bytes(slot) + a as u64 * BLOCK)?;
            self.hdd
                .write_at(&buf, piece * self.cfg.piece + a as u64 * BLOCK)?;
            self.c.moved.fetch_add(len as u64, Ordering::Relaxed);
        }
        st.dirty[slot * w..(slot + 1) * w].fill(0);
        if st.dirty_order.owner(slot).is_some() {
            st.dirty_order.remove(slot);
        }
        Ok(())
    }

    /// A slot for `piece`: its own, a free one, or the LRU piece's (written
    /// back first if dirty).
    fn slot_for(&self, st: &mut State, piece: u64) -> io::Result<usize> {
        if let Some(&s) = st.index.get(&piece) {
            return Ok(s);
        }
        let slot = match st.free.pop() {
            Some(s) => s,
            None => {
                let Some(victim) = st.lru.front(L) else {
                    return Err(io::Error::other("cache without slots"));
                };
                if st.dirty_order.owner(victim).is_some() {
                    self.write_back(st, victim)?;
                }
                st.lru.remove(victim);
                let old = st.piece_of[victim];
                st.index.remove(&old);
                victim
            }
        };
        let w = st.words;
        st.valid[slot * w..(slot + 1) * w].fill(0);
        st.dirty[slot * w..(slot + 1) * w].fill(0);
        st.piece_of[slot] = piece;
        st.index.insert(piece, slot);
        st.lru.push_back(L, slot);
        Ok(slot)
    }

    /// Whether a read of `offset..offset + len` misses any piece: the HDD
    /// serves that part.
    fn misses(&self, offset: u64, len: u64) -> bool {
        let st = self.st.lock();
        let w = st.words;
        parts(offset, len, self.cfg.piece).into_iter().any(|p| {
            let (b0, b1) = (
                (p.at / BLOCK) as usize,
                (p.at + p.len).div_ceil(BLOCK) as usize,
            );
            let slot = st.index.get(&p.piece).copied();
            !slot.is_some_and(|s| bits(&st.valid[s * w..(s + 1) * w], b0, b1).all(|v| v))
        })
    }

    fn read(&self, req: &Req, buf: &mut [u8]) -> io::Result<()> {
        let bypass = req.hint.seq_run > self.cfg.seq_cutoff;
        let mut st = self.st.lock();
        let w = st.words;
        for p in parts(req.offset, req.len, self.cfg.piece) {
            let (b0, b1) = (
                (p.at / BLOCK) as usize,
                (p.at + p.len).div_ceil(BLOCK) as usize,
            );
            let slot = st.index.get(&p.piece).copied();
            let held = slot.is_some_and(|s| bits(&st.valid[s * w..(s + 1) * w], b0, b1).all(|v| v));
            let out = &mut buf[..p.len as usize];
            if let (true, Some(s)) = (held, slot) {
                self.ssd.read_at(out, self.slot_bytes(s) + p.at)?;
                self.c.read_hit[0].fetch_add(p.len, Ordering::Relaxed);
                if !bypass {
                    st.lru.move_to_back(L, s);
                    if let Some(g) = st.ghost.as_mut() {
                        g.on_hit();
                    }
                }
                continue;
            }
            // A miss: the HDD serves it; blocks held dirty come from the SSD.
            self.hdd.read_at(out, p.piece * self.cfg.piece + p.at)?;
            if let Some(s) = slot {
                for (a, b) in runs(&st.dirty[s * w..(s + 1) * w], b0, b1) {
                    let from = (a as u64 * BLOCK).max(p.at);
                    let to = (b as u64 * BLOCK).min(p.at + p.len);
                    let part = &mut out[(from - p.at) as usize..(to - p.at) as usize];
                    self.ssd.read_at(part, self.slot_bytes(s) + from)?;
                }
            }
            self.c.read_hit[1].fetch_add(p.len, Ordering::Relaxed);
            if bypass {
                continue;
            }
            let admit = match st.ghost.as_mut() {
                None => true,
                Some(g) => slot.is_some() || g.on_miss(p.piece),
            };
            if admit && !st.pending.contains(&p.piece) {
                st.pending.push(p.piece);
            }
        }
        Ok(())
    }

    fn write(&self, req: &Req, buf: &[u8]) -> io::Result<()> {
        let bypass = req.hint.seq_run > self.cfg.seq_cutoff;
        let mut st = self.st.lock();
        let w = st.words;
        for p in parts(req.offset, req.len, self.cfg.piece) {
            let (b0, b1) = (
                (p.at / BLOCK) as usize,
                (p.at + p.len).div_ceil(BLOCK) as usize,
            );
            let data = &buf[..p.len as usize];
            if bypass {
                self.hdd.write_at(data, p.piece * self.cfg.piece + p.at)?;
                self.c.landed[1].fetch_add(p.len, Ordering::Relaxed);
                if let Some(&s) = st.index.get(&p.piece) {
                    set_bits(&mut st.valid[s * w..(s + 1) * w], b0, b1, false);
                    set_bits(&mut st.dirty[s * w..(s + 1) * w], b0, b1, false);
                }
                continue;
            }
            let s = self.slot_for(&mut st, p.piece)?;
            self.ssd.write_at(data, self.slot_bytes(s) + p.at)?;
            self.c.ssd_written.fetch_add(p.len, Ordering::Relaxed);
            self.c.landed[0].fetch_add(p.len, Ordering::Relaxed);
            set_bits(&mut st.valid[s * w..(s + 1) * w], b0, b1, true);
            set_bits(&mut st.dirty[s * w..(s + 1) * w], b0, b1, true);
            st.lru.move_to_back(L, s);
            if st.dirty_order.owner(s).is_none() {
                st.dirty_order.push_back(L, s);
            }
        }
        Ok(())
    }

    /// Admit the pieces the last request missed, then write back one piece
    /// if more than the dirty share is dirty.
    fn background(&self) -> io::Result<()> {
        let mut st = self.st.lock();
        let pending = std::mem::take(&mut st.pending);
        let w = st.words;
        let n = self.blocks();
        for piece in pending {
            let s = self.slot_for(&mut st, piece)?;
            // What the SSD lacks, read from the HDD in one piece and written
            // to the SSD (blocks held dirty are kept).
            let lacking: Vec<(usize, usize)> = {
                let mut missing = st.valid[s * w..(s + 1) * w].to_vec();
                missing.iter_mut().for_each(|x| *x = !*x);
                runs(&missing, 0, n)
            };
            let (Some(first), Some(last)) = (lacking.first(), lacking.last()) else {
                continue;
            };
            let (a, b) = (first.0, last.1);
            let len = ((b - a) as u64 * BLOCK) as usize;
            let mut data = vec![0u8; len];
            self.hdd
                .read_at(&mut data, piece * self.cfg.piece + a as u64 * BLOCK)?;
            for (x, y) in &lacking {
                let from = (x - a) * BLOCK as usize;
                let to = (y - a) * BLOCK as usize;
                self.ssd
                    .write_at(&data[from..to], self.slot_bytes(s) + *x as u64 * BLOCK)?;
                self.c
                    .ssd_written
                    .fetch_add((to - from) as u64, Ordering::Relaxed);
            }
            set_bits(&mut st.valid[s * w..(s + 1) * w], 0, n, true);
            st.lru.move_to_back(L, s);
            self.c.moved.fetch_add(len as u64, Ordering::Relaxed);
            self.c.admissions.fetch_add(1, Ordering::Relaxed);
            st.landed.push(piece);
        }
        let slots = st.piece_of.len();
        if st.dirty_order.len(L) as f64 > self.cfg.dirty_share * slots as f64 {
            if let Some(s) = st.dirty_order.front(L) {
                self.write_back(&mut st, s)?;
            }
        }
        Ok(())
    }

    /// Pieces admitted so far.
    pub fn admissions(&self) -> u64 {
        self.c.admissions.load(Ordering::Relaxed)
    }
}

impl Target for Cache {
    fn name(&self) -> &'static str {
        self.name
    }

    fn io(&self, req: &Req, buf: &mut [u8]) -> io::Result<()> {
        let buf = &mut buf[..req.len as usize];
        if req.read {
            self.read(req, buf)
        } else {
            self.write(req, buf)
        }
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut st = self.st.lock();
        let w = st.words;
        for p in parts(offset, len, self.cfg.piece) {
            if let Some(&s) = st.index.get(&p.piece) {
                let (b0, b1) = ((p.at / BLOCK) as usize, ((p.at + p.len) / BLOCK) as usize);
                set_bits(&mut st.valid[s * w..(s + 1) * w], b0, b1, false);
                set_bits(&mut st.dirty[s * w..(s + 1) * w], b0, b1, false);
                if st.dirty[s * w..(s + 1) * w].iter().all(|x| *x == 0)
                    && st.dirty_order.owner(s).is_some()
                {
                    st.dirty_order.remove(s);
                }
            }
        }
        Ok(())
    }

    fn after(&self) {
        if let Err(e) = self.background() {
            tracing::warn!("{}: {e}", self.name);
        }
    }

    fn read_is_slow(&self, offset: u64, len: u64) -> bool {
        self.misses(offset, len)
    }

    fn landed(&self) -> Vec<(u64, u64)> {
        let piece = self.cfg.piece;
        std::mem::take(&mut self.st.lock().landed)
            .into_iter()
            .map(|p| (p * piece, piece))
            .collect()
    }

    fn usage(&self) -> Usage {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Usage {
            busy: [self.ssd.model_busy(), self.hdd.model_busy()].map(|d| d.unwrap_or_default()),
            ssd_written: get(&self.c.ssd_written),
            moved: get(&self.c.moved),
            read_hit: [get(&self.c.read_hit[0]), get(&self.c.read_hit[1])],
            landed: [get(&self.c.landed[0]), get(&self.c.landed[1])],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd::device::MemDevice;
    use tierd::units::IoHint;

    const P: u64 = 64 << 10;

    fn cache(cfg: CacheConfig, pieces: u64) -> (Cache, Arc<dyn BlockDevice>) {
        let hdd: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * P));
        let ssd: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(pieces * P));
        (Cache::new("t", cfg, ssd, hdd.clone()), hdd)
    }

    fn req(read: bool, offset: u64, len: u64) -> Req {
        Req {
            read,
            offset,
            len,
            hint: IoHint::default(),
        }
    }

    fn read(c: &Cache, offset: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len as usize];
        c.io(&req(true, offset, len), &mut buf).expect("read");
        c.after();
        buf
    }

    fn write(c: &Cache, offset: u64, data: &[u8]) {
        let mut buf = data.to_vec();
        c.io(&req(false, offset, data.len() as u64), &mut buf)
            .expect("write");
        c.after();
    }

    #[test]
    fn a_miss_admits_its_piece_and_the_rest_of_it_then_hits() {
        let (c, hdd) = cache(CacheConfig::lru(P), 4);
        hdd.write_at(&[7u8; P as usize], 3 * P).expect("seed");
        assert_eq!(read(&c, 3 * P, 4096), vec![7u8; 4096]);
        let u = c.usage();
        assert_eq!((u.read_hit, u.moved), ([0, 4096], P), "{u:?}");
        // Another block of the same piece: from the SSD, with the data.
        assert_eq!(read(&c, 3 * P + 8192, 4096), vec![7u8; 4096]);
        assert_eq!(c.usage().read_hit, [4096, 4096]);
        assert_eq!(c.admissions(), 1);
        // The replay learns which piece its copy brought up, once.
        assert_eq!(c.landed(), vec![(3 * P, P)]);
        assert!(c.landed().is_empty());
    }

    #[test]
    fn larc_admits_a_miss_only_on_its_second_sighting() {
        let (c, _) = cache(CacheConfig::larc(P), 4);
        read(&c, 0, 4096);
        assert_eq!(c.admissions(), 0, "a first miss only enters the ghost list");
        read(&c, 4096, 4096);
        assert_eq!(c.admissions(), 1, "seen again: admitted");
        read(&c, 8192, 4096);
        assert_eq!(c.usage().read_hit, [4096, 8192]);
    }

    #[test]
    fn writes_land_on_flash_and_reach_the_hdd_when_evicted_or_written_back() {
        // Two pieces of cache: a third piece written evicts the first,
        // whose dirty blocks go home first.
        let (c, hdd) = cache(CacheConfig::lru(P), 2);
        write(&c, 0, &[1u8; 4096]);
        write(&c, P, &[2u8; 4096]);
        assert_eq!(c.usage().landed, [8192, 0]);
        let mut home = vec![0u8; 4096];
        hdd.read_at(&mut home, 0).expect("hdd");
        // Both pieces dirty (more than a tenth of two): one went home
        // already, the oldest.
        assert_eq!(
            home,
            vec![1u8; 4096],
            "the oldest dirty piece was written back"
        );
        write(&c, 2 * P, &[3u8; 4096]);
        write(&c, 3 * P, &[4u8; 4096]);
        for (piece, byte) in [(0u64, 1u8), (1, 2)] {
            hdd.read_at(&mut home, piece * P).expect("hdd");
            assert_eq!(home, vec![byte; 4096], "piece {piece} reached the HDD");
        }
        // What the cache serves is the newest data, wherever it is.
        assert_eq!(read(&c, 0, 4096), vec![1u8; 4096]);
        assert_eq!(read(&c, 3 * P, 4096), vec![4u8; 4096]);
    }

    #[test]
    fn a_miss_on_a_piece_holding_dirty_blocks_reads_them_from_flash() {
        let (c, hdd) = cache(CacheConfig::larc(P), 4);
        hdd.write_at(&[1u8; 8192], 0).expect("seed");
        // LARC: the write allocates the piece; the block beside it is not
        // on flash, so a read of both misses and must take the newest
        // data of the written block from the SSD.
        write(&c, 0, &[2u8; 4096]);
        let got = read(&c, 0, 8192);
        assert_eq!(&got[..4096], &[2u8; 4096][..]);
        assert_eq!(&got[4096..], &[1u8; 4096][..]);
    }

    #[test]
    fn a_long_stream_bypasses_the_cache_and_drops_stale_copies() {
        let (c, hdd) = cache(CacheConfig::lru(P), 4);
        write(&c, 0, &[5u8; 4096]);
        let long = IoHint { seq_run: 8 << 20 };
        let mut buf = vec![9u8; 4096];
        c.io(
            &Req {
                hint: long,
                ..req(false, 0, 4096)
            },
            &mut buf,
        )
        .expect("write");
        c.after();
        assert_eq!(c.usage().landed, [4096, 4096]);
        let mut home = vec![0u8; 4096];
        hdd.read_at(&mut home, 0).expect("hdd");
        assert_eq!(home, vec![9u8; 4096]);
        // The cached block was dropped: the read goes to the HDD, newest.
        let mut got = vec![0u8; 4096];
        c.io(
            &Req {
                hint: long,
                ..req(true, 0, 4096)
            },
            &mut got,
        )
        .expect("read");
        c.after();
        assert_eq!(got, vec![9u8; 4096]);
        assert_eq!(c.admissions(), 0, "a scan admits nothing");
    }
}
