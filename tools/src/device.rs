//! `tierctl device PATH`: a device's superblock, read directly (no daemon).

use std::path::Path;

use anyhow::Context;
use tierd::device::{BlockDevice, FileDevice};
use tierd::volume::{detect_content, Superblock, PROBE_SIZE};

use crate::out::{human, say, utc};

pub fn show(path: &Path, json: bool) -> anyhow::Result<()> {
    let dev =
        FileDevice::open(path, false).with_context(|| format!("opening {}", path.display()))?;
    let mut probe = vec![0u8; PROBE_SIZE.min(dev.size() as usize)];
    dev.read_at(&mut probe, 0)
        .with_context(|| format!("reading {}", path.display()))?;
    let sb = Superblock::decode(&probe);
    let content = detect_content(&probe);
    if json {
        let v = match &sb {
            Ok(sb) => serde_json::json!({
                "path": path, "size": dev.size(), "tierd": true,
                "role": sb.role, "volume_id": sb.volume_id, "format_version": sb.version,
                "extent_size": sb.extent_size, "device_size": sb.device_size,
                "data_offset": sb.data_offset, "slots": sb.slots, "created": sb.created,
            }),
            Err(e) => serde_json::json!({
                "path": path, "size": dev.size(), "tierd": false,
                "problem": e.to_string(), "content": content,
            }),
        };
        say!("{v}");
    } else {
        match &sb {
            Ok(sb) => say!(
                "{}: tierd {} device of volume {}\n  format version {}, extent size {}, {} slots from offset {}\n  device size {} (at format: {}), formatted {}",
                path.display(), sb.role, sb.volume_id, sb.version, human(sb.extent_size),
                sb.slots, human(sb.data_offset), human(dev.size()), human(sb.device_size), utc(sb.created)
            ),
            Err(e) => say!(
                "{}: not a tierd device ({e}); it carries {}",
                path.display(),
                content.as_deref().unwrap_or("nothing recognisable")
            ),
        }
    }
    Ok(())
}
