//! The C allocator's per-process tuning for a long-running daemon: how many
//! malloc arenas glibc keeps.
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
}
