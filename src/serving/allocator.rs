//! The C allocator's per-process tuning for a long-running daemon: how many
//! malloc arenas glibc keeps, and giving back what it holds free.
//!
//! glibc gives threads up to eight arenas per core, each keeping its own
//! freed memory. The daemon's I/O threads, runtime workers and migrator
//! allocate mapping entries, heat entries and store records on whichever
//! thread is at hand, so each arena ends up holding some: at 16 M extents
//! with 1 % written, 392 MiB resident with the default against 356 MiB with
//! two arenas (docs/performance.md, "Scale"). One arena per core keeps the
//! allocator's locks uncontended on the machines this runs on.

/// Limit glibc's malloc arenas to one per core (at least two), unless
/// `MALLOC_ARENA_MAX` says otherwise; the limit set, if any. Call it first
/// thing in `main`, before any thread starts.
pub fn limit_malloc_arenas() -> Option<i32> {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let arenas = i32::try_from(cores.max(2)).unwrap_or(i32::MAX);
    set_arena_max(arenas).then_some(arenas)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(arenas: i32) -> bool {
    // SAFETY: mallopt only sets one of glibc's allocator parameters; it
    // takes plain integers, touches no memory of ours, and glibc takes its
    // own lock for it. M_ARENA_MAX bounds arenas created from now on.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: i32) -> bool {
    false
}

/// Free bytes glibc must hold before [`trim_when_worth`] gives them back.
pub const TRIM_AT: u64 = 16 << 20;

/// The free bytes found at the last trim.
static LAST_TRIM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Give the memory glibc holds free back to the kernel when there is enough
/// of it: at least [`TRIM_AT`] and a quarter of its arenas, and at least
/// half of [`TRIM_AT`] more or less than at the last trim (what was given
/// back stays counted as free). Returns the free bytes it found when it
/// trimmed.
///
/// Why: glibc returns freed memory to the kernel only from the top of an
/// arena. Heat entries, side-table mappings and planner lists for a whole
/// volume's worth of extents are freed in the middle once they are no
/// longer needed (a fill's heat decays away, a write log drains), and that
/// memory stayed resident: a 128 Ki-extent scattered fill on tmpfs held
/// 56 MiB after heat had forgotten every extent, 28 MiB after a
/// `malloc_trim`. Cheap enough to ask every half minute: `mallinfo2` and
/// `malloc_trim` walk the arenas' free lists.
pub fn trim_when_worth() -> Option<u64> {
    use std::sync::atomic::Ordering;
    let (free, arenas) = free_and_arenas()?;
    let moved = free.abs_diff(LAST_TRIM.load(Ordering::Relaxed)) >= TRIM_AT / 2;
    if free >= TRIM_AT && free.saturating_mul(4) >= arenas && moved && trim() {
        LAST_TRIM.store(free, Ordering::Relaxed);
        Some(free)
    } else {
        None
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn free_and_arenas() -> Option<(u64, u64)> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct by
    // value; glibc takes its own arena locks while it counts.
    let m = unsafe { libc::mallinfo2() };
    Some((m.fordblks as u64, m.arena as u64))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() -> bool {
    // SAFETY: malloc_trim takes a plain integer (the bytes to leave at the
    // top of the heap), touches only memory glibc holds free, and takes
    // glibc's own arena locks.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn free_and_arenas() -> Option<(u64, u64)> {
    None
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_set_unless_the_environment_sets_one() {
        let set = limit_malloc_arenas();
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            assert_eq!(set, None);
        } else if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(set.is_some_and(|n| n >= 2), "{set:?}");
        }
    }

    #[test]
    fn memory_freed_in_the_middle_of_the_heap_is_given_back() {
        if !cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert_eq!(trim_when_worth(), None);
            return;
        }
        // 96 MiB in small pieces, freed but for the last, which keeps the
        // freed ones from the top of the heap where free() trims by itself.
        let mut pieces: Vec<Box<[u8; 1024]>> =
            (0..96 * 1024).map(|_| Box::new([1u8; 1024])).collect();
        let last = pieces.pop();
        drop(pieces);
        let trimmed = trim_when_worth();
        assert!(trimmed.is_some_and(|free| free >= TRIM_AT), "{trimmed:?}");
        // Nothing new to give back right after (what was given back is
        // still counted free).
        assert_eq!(trim_when_worth(), None);
        drop(last);
    }
}
