//! Replacing the SSD of a serving volume: once the SSD is drained
//! (`tierctl evacuate ssd` has moved every extent and emptied the write
//! log), [`Volume::replace_ssd`] puts a new device in its place without
//! stopping the volume.
//!
//! The steps, and why a crash at any point loses nothing:
//! 1. flush, so slots freed by the draining are free for good; then close
//!    the SSD's slots in the allocator, checking under the same lock that
//!    none is in use: from here no data can land on the SSD;
//! 2. check the new device (big enough, nothing on it unless forced) and
//!    write it a superblock of this volume with a creation stamp newer
//!    than the old one's; sync it;
//! 3. record the new stamp and path in the metadata store and flush (if
//!    that fails, the old values are put back, so no later flush can make
//!    the store name a device that is not in use);
//! 4. swap the device in (the same I/O meter goes on counting).
//!
//! A crash before 3 leaves a store that accepts the old device (neither
//! holds data the mapping points at, and the new one has no record yet).
//! After 3 the old device is refused at open, naming the new path
//! ([`check_replaced`]), and the new one is accepted; the SSD is empty
//! either way. A replacement that fails after step 2 leaves the new device
//! an SSD superblock of this volume that no record names: a retry takes
//! that device as it is (the device in use, and the HDD, are refused). The whole replacement runs under the lock that changing the
//! drained tier takes, so a cancel cannot open the SSD's slots midway; the
//! slots stay closed until draining ends ([`Volume::set_evacuating`]).

use std::sync::Arc;

use super::geometry::{Tier, DATA_OFFSET};
use super::superblock::{detect_content, Superblock, FORMAT_VERSION, PROBE_SIZE};
use super::{io_err, Volume, VolumeError, VolumeResult};
use crate::device::{BlockDevice, MeteredDevice};
use crate::store::MetaStore;

/// The creation stamp of the SSD in use, once it was replaced.
const SSD_CREATED_KEY: &str = "ssd-created";
/// The path the replacing SSD was given as.
const SSD_PATH_KEY: &str = "ssd-path";

/// Refuse an SSD whose superblock is older than the replacement the store
/// recorded (the old device, put back by an old configuration).
pub(super) fn check_replaced(
    store: &dyn MetaStore,
    ssd: &Superblock,
    device: String,
) -> VolumeResult<()> {
    let Some(raw) = store.get(SSD_CREATED_KEY)?.filter(|r| !r.is_empty()) else {
        return Ok(());
    };
    let want: u64 = String::from_utf8_lossy(&raw)
        .parse()
        .map_err(|e| VolumeError::Corrupt(format!("{SSD_CREATED_KEY}: {e}")))?;
    if ssd.created == want {
        return Ok(());
    }
    let replaced_by = replaced_ssd_path(store)?.unwrap_or_else(|| "the replacement device".into());
    Err(VolumeError::ReplacedSsd {
        device,
        replaced_by,
    })
}

/// The path the SSD in use was given as when it replaced the old one
/// (`None` if the volume's SSD was never replaced).
pub fn replaced_ssd_path(store: &dyn MetaStore) -> VolumeResult<Option<String>> {
    Ok(store
        .get(SSD_PATH_KEY)?
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(&p).into_owned()))
}

/// Whether `ssd` (a superblock read off a device) is the SSD `store`'s
/// volume uses now: one of its SSD superblocks, not replaced since.
pub fn is_ssd_in_use(store: &dyn MetaStore, ssd: &Superblock) -> VolumeResult<bool> {
    let id = store.get(super::VOLUME_ID_KEY)?.unwrap_or_default();
    Ok(ssd.role == Tier::Ssd
        && ssd.volume_id.to_string().as_bytes() == id.as_slice()
        && check_replaced(store, ssd, String::new()).is_ok())
}

impl Volume {
    /// Put `new` in place of the drained SSD (see the module docs). `path`
    /// is how the operator named it (recorded for the message that refuses
    /// the old device later). Without `force`, a device that carries a
    /// filesystem, a partition table or a superblock is refused.
    pub fn replace_ssd(
        &self,
        new: Arc<dyn BlockDevice>,
        path: &str,
        force: bool,
    ) -> VolumeResult<()> {
        let _serial = self.evac_lock.lock();
        if self.evacuating() != Some(Tier::Ssd) {
            return Err(VolumeError::Replace(
                "the SSD is not being drained: run `tierctl evacuate ssd` and wait until it is empty".into(),
            ));
        }
        let needed = self.geo.min_device_size(Tier::Ssd);
        if new.size() < needed {
            return Err(VolumeError::TooSmall {
                device: new.name(),
                size: new.size(),
                needed,
            });
        }
        let mut probe = vec![0u8; PROBE_SIZE.min(new.size() as usize)];
        new.read_at(&mut probe, 0).map_err(io_err(new.as_ref()))?;
        let mut leftover = false;
        if let Ok(sb) = Superblock::decode(&probe) {
            // This volume's HDD, or the SSD in use, is refused; an SSD
            // superblock of this volume with another stamp is what a
            // replacement that failed after writing it left (its record
            // never reached the store): the device is free to take.
            if sb.volume_id == self.id {
                if sb.role == Tier::Hdd || sb.created == self.ssd_created() {
                    return Err(VolumeError::Replace(format!(
                        "{} is already this volume's {}",
                        new.name(),
                        sb.role
                    )));
                }
                leftover = true;
            }
        }
        if !force && !leftover {
            if let Some(found) = detect_content(&probe) {
                return Err(VolumeError::HasContent {
                    device: new.name(),
                    found,
                });
            }
        }
        // 1. Nothing on the SSD, and nothing can land there any more.
        self.flush()?;
        let log = self.log.usage();
        if log.segments > 0 {
            return Err(VolumeError::Replace(format!(
                "the write log still holds {} segments on the SSD: wait until draining is done",
                log.segments
            )));
        }
        if let Err(used) = self.alloc.close_if_empty(Tier::Ssd, self.geo.ssd_slots) {
            return Err(VolumeError::Replace(format!(
                "the SSD still holds {used} extents: wait until `tierctl evacuate ssd` is done"
            )));
        }
        let done = self.install_ssd(new, path);
        if done.is_ok() {
            // A lost SSD is replaced: the volume has an SSD again.
            self.ssd_lost
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
        if done.is_err() {
            // The old SSD stays, empty and closed as draining wants it.
            tracing::warn!("replacing the SSD failed; the old one stays in place");
        }
        done
    }

    /// The creation stamp of the SSD in use (0 if its superblock does not
    /// read).
    fn ssd_created(&self) -> u64 {
        let old = self.devices.get(Tier::Ssd);
        let mut buf = vec![0u8; super::superblock::SUPERBLOCK_SIZE];
        old.read_at(&mut buf, 0)
            .ok()
            .and_then(|()| Superblock::decode(&buf).ok())
            .map(|sb| sb.created)
            .unwrap_or(0)
    }

    /// Steps 2 to 4 of the replacement.
    fn install_ssd(&self, new: Arc<dyn BlockDevice>, path: &str) -> VolumeResult<()> {
        let old_created = self.ssd_created();
        let created = super::open::now_secs().max(old_created + 1);
        let sb = Superblock {
            version: FORMAT_VERSION,
            role: Tier::Ssd,
            volume_id: self.id,
            extent_size: self.geo.extent_size,
            device_size: new.size(),
            data_offset: DATA_OFFSET,
            slots: u64::from(self.geo.ssd_slots),
            created,
        };
        new.write_at(&sb.encode(), 0)
            .map_err(io_err(new.as_ref()))?;
        new.sync().map_err(io_err(new.as_ref()))?;
        let old = [
            self.store.get(SSD_CREATED_KEY)?.unwrap_or_default(),
            self.store.get(SSD_PATH_KEY)?.unwrap_or_default(),
        ];
        let recorded = self
            .store
            .put(SSD_CREATED_KEY, created.to_string().as_bytes())
            .and_then(|()| self.store.put(SSD_PATH_KEY, path.as_bytes()))
            .map_err(VolumeError::from)
            .and_then(|()| {
                self.mark_meta_dirty();
                self.flush()
            });
        if let Err(e) = recorded {
            // No later flush may record a device that is not in use.
            let _ = self.store.put(SSD_CREATED_KEY, &old[0]);
            let _ = self.store.put(SSD_PATH_KEY, &old[1]);
            let _ = self.flush();
            return Err(e);
        }
        let name = new.name();
        self.devices.set(
            Tier::Ssd,
            Arc::new(MeteredDevice::with_meter(new, self.meters[0].clone())),
        );
        tracing::info!(device = %name, "the SSD was replaced");
        Ok(())
    }
}
