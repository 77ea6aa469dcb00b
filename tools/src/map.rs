//! `tierctl placement --map`: a coloured map of where a range's extents sit.

use tierd::control::{PlacementMap, Where};

use crate::out::{human, paint, say};

/// One cell per group of extents: S all SSD, H all HDD, m mixed, . unmapped.
pub fn print(p: &PlacementMap, cells: usize) {
    let es = p.extent_size;
    let first = p.offset / es;
    let end = (p.offset + p.len).div_ceil(es);
    let extents = end - first;
    // Counts [ssd, hdd, unmapped] per cell: as the daemon counted them, or
    // from the runs.
    let (per, counts) = match &p.cells {
        Some(c) => (c.per_cell, c.counts.clone()),
        None => from_runs(p, cells, first, end),
    };
    say!(
        "{} .. {} ({} extents of {}, {} per cell)",
        human(first * es),
        human(end * es),
        extents,
        human(es),
        per
    );
    let width = 64;
    for (row, chunk) in counts.chunks(width).enumerate() {
        let mut line = String::new();
        for c in chunk {
            line.push_str(&match (c[0] > 0, c[1] > 0) {
                (true, false) => paint("42;30", "S"),
                (false, true) => paint("44;37", "H"),
                (true, true) => paint("43;30", "m"),
                (false, false) => paint("2", "."),
            });
        }
        let at = first + (row * width) as u64 * per;
        say!("{:>10} {line}", human(at * es));
    }
    say!(
        "legend: {} SSD  {} HDD  {} both  {} unmapped",
        paint("42;30", "S"),
        paint("44;37", "H"),
        paint("43;30", "m"),
        paint("2", ".")
    );
}

/// Extents per cell, and the counts per cell, of `cells` cells over the
/// extents `first..end` from the runs of `p`.
fn from_runs(p: &PlacementMap, cells: usize, first: u64, end: u64) -> (u64, Vec<[u64; 3]>) {
    let es = p.extent_size;
    let extents = end - first;
    let cells = (cells as u64).min(extents).max(1);
    let per = extents.div_ceil(cells);
    let cells = extents.div_ceil(per);
    let mut counts = vec![[0u64; 3]; cells as usize];
    for r in &p.runs {
        let (a, b) = (r.offset / es, (r.offset + r.len) / es);
        for e in a.max(first)..b.min(end) {
            let c = ((e - first) / per) as usize;
            let k = match r.at {
                Where::Ssd => 0,
                Where::Hdd => 1,
                Where::Unmapped => 2,
            };
            counts[c][k] += 1;
        }
    }
    (per, counts)
}
