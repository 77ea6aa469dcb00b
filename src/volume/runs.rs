//! The run table: the one run of written blocks of each extent whose
//! mapping is plain but for that run ([`super::map`]'s `RUN` words), as
//! `first | length << 16` (never 0: a run has at least one block).
//!
//! It is paged by extent, [`PAGE`] extents a page, and a page takes the
//! cheaper of two forms for what it holds: a sorted list of
//! `(index in page, run)` while few of its extents have a run (eight bytes
//! an entry, nothing for a page with none), an array of one `u32` per
//! extent once many do (four bytes an extent, full or not). A volume whose
//! every extent has one write in it (a scattered fill) so costs four bytes
//! an extent here; a hash map cost about eighteen (eight bytes an entry at
//! a load near a half). A page goes back to a list once few of its runs
//! are left, well below the point where it became an array, so a page at
//! the edge does not change form with every write.

use parking_lot::Mutex;

/// Extents a page covers.
pub(crate) const PAGE: usize = 1024;
/// A list this long becomes an array (the two then take the same bytes).
const TO_ARRAY: usize = PAGE / 2;
/// An array with fewer runs than this becomes a list again.
const TO_LIST: usize = PAGE / 8;

enum Page {
    /// `(index in page, run)`, sorted by index.
    List(Vec<(u16, u32)>),
    /// One run per extent of the page, 0 for none, and how many are set.
    Array(Box<[u32]>, usize),
}

impl Page {
    fn get(&self, i: u16) -> Option<u32> {
        match self {
            Page::List(list) => list
                .binary_search_by_key(&i, |&(k, _)| k)
                .ok()
                .and_then(|at| list.get(at))
                .map(|&(_, run)| run),
            Page::Array(runs, _) => runs.get(usize::from(i)).copied().filter(|&r| r != 0),
        }
    }

    fn take(&mut self, i: u16) -> Option<u32> {
        let run = match self {
            Page::List(list) => {
                let at = list.binary_search_by_key(&i, |&(k, _)| k).ok()?;
                let (_, run) = list.remove(at);
                if list.is_empty() {
                    *list = Vec::new();
                }
                run
            }
            Page::Array(runs, count) => {
                let slot = runs.get_mut(usize::from(i))?;
                let run = std::mem::take(slot);
                if run == 0 {
                    return None;
                }
                *count -= 1;
                run
            }
        };
        if let Page::Array(runs, count) = self {
            if *count < TO_LIST {
                let list = runs
                    .iter()
                    .enumerate()
                    .filter(|&(_, &r)| r != 0)
                    .map(|(k, &r)| (k as u16, r))
                    .collect();
                *self = Page::List(list);
            }
        }
        Some(run)
    }

    fn insert(&mut self, i: u16, run: u32) {
        match self {
            Page::List(list) => {
                match list.binary_search_by_key(&i, |&(k, _)| k) {
                    Ok(at) => {
                        if let Some(e) = list.get_mut(at) {
                            e.1 = run;
                        }
                        return;
                    }
                    Err(at) => list.insert(at, (i, run)),
                }
                if list.len() >= TO_ARRAY {
                    let mut runs = vec![0u32; PAGE].into_boxed_slice();
                    for &(k, r) in list.iter() {
                        if let Some(slot) = runs.get_mut(usize::from(k)) {
                            *slot = r;
                        }
                    }
                    let count = list.len();
                    *self = Page::Array(runs, count);
                }
            }
            Page::Array(runs, count) => {
                if let Some(slot) = runs.get_mut(usize::from(i)) {
                    if *slot == 0 {
                        *count += 1;
                    }
                    *slot = run;
                }
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Page::List(list) => list.len(),
            Page::Array(_, count) => *count,
        }
    }
}

/// The runs of a map's extents (callers hold the extent's lock: the
/// page's own lock only keeps the page whole).
pub(crate) struct RunTable {
    pages: Box<[Mutex<Page>]>,
    extents: u64,
}

impl RunTable {
    /// A table for `extents` extents, holding no run.
    pub(crate) fn new(extents: u64) -> RunTable {
        let pages = extents.div_ceil(PAGE as u64) as usize;
        RunTable {
            pages: (0..pages)
                .map(|_| Mutex::new(Page::List(Vec::new())))
                .collect(),
            extents,
        }
    }

    fn page(&self, extent: u64) -> Option<(&Mutex<Page>, u16)> {
        if extent >= self.extents {
            return None;
        }
        let page = self
            .pages
            .get(usize::try_from(extent / PAGE as u64).ok()?)?;
        Some((page, (extent % PAGE as u64) as u16))
    }

    /// The run of `extent`, if it has one.
    pub(crate) fn get(&self, extent: u64) -> Option<u32> {
        let (page, i) = self.page(extent)?;
        page.lock().get(i)
    }

    /// The run of `extent`, taken out.
    pub(crate) fn take(&self, extent: u64) -> Option<u32> {
        let (page, i) = self.page(extent)?;
        page.lock().take(i)
    }

    /// Set the run of `extent` (not 0; false if the extent is beyond the
    /// table).
    pub(crate) fn insert(&self, extent: u64, run: u32) -> bool {
        debug_assert_ne!(run, 0, "a run has at least one block");
        match self.page(extent) {
            Some((page, i)) => {
                page.lock().insert(i, run);
                true
            }
            None => false,
        }
    }

    /// Runs held (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pages.iter().map(|p| p.lock().len()).sum()
    }

    /// Pages held as arrays (for tests).
    #[cfg(test)]
    fn arrays(&self) -> usize {
        self.pages
            .iter()
            .filter(|p| matches!(*p.lock(), Page::Array(..)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn runs_come_back_as_set_through_both_forms() {
        let t = RunTable::new(3 * PAGE as u64 + 5);
        let mut model = BTreeMap::new();
        // A deterministic walk of sets and takes that fills page 1 past
        // the array point and empties it again.
        let mut x: u64 = 7;
        for step in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let filling = step < 10_000;
            let extent = if x.is_multiple_of(3) {
                (x >> 20) % (3 * PAGE as u64 + 5)
            } else {
                PAGE as u64 + (x >> 20) % PAGE as u64
            };
            let run = ((x >> 40) as u32).max(1);
            if filling || x.is_multiple_of(5) {
                assert!(t.insert(extent, run));
                model.insert(extent, run);
            } else {
                assert_eq!(t.take(extent), model.remove(&extent), "take {extent}");
            }
            if step % 997 == 0 {
                for e in 0..3 * PAGE as u64 + 5 {
                    assert_eq!(t.get(e), model.get(&e).copied(), "get {e} at {step}");
                }
            }
            if step == 9_999 {
                assert!(t.arrays() >= 1, "a page past half full is an array");
            }
        }
        assert_eq!(t.len(), model.len());
        // Take all but every sixteenth: every page is a list again.
        for e in 0..3 * PAGE as u64 + 5 {
            if e % 16 != 0 {
                assert_eq!(t.take(e), model.remove(&e), "take {e}");
            }
        }
        assert_eq!(t.arrays(), 0, "a page with few runs left is a list again");
        for e in 0..3 * PAGE as u64 + 5 {
            assert_eq!(t.get(e), model.get(&e).copied(), "get {e} at the end");
        }
        assert_eq!(t.len(), model.len());
        assert!(!t.insert(3 * PAGE as u64 + 5, 1), "beyond the table");
        assert_eq!(t.get(u64::MAX), None);
    }
}
