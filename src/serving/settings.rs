//! The configuration of a running daemon and what may change in it: the
//! configuration as loaded (defaults, file, `TIERD_*`, flags), the live
//! settings an operator made with `tierctl config set` (kept in the
//! metadata store, so they survive restarts, and winning over the
//! configuration until `tierctl config reset`), and the reload that
//! SIGHUP, `systemctl reload` and `tierctl reload` start.
//!
//! The keys that may change live are every `[migrate]` key, the heat
//! map's `sequential-cutoff`, `log-level`, and `reserve`, which for a
//! running volume is the target of SSD space kept free (the reserve fixed
//! at format stays in the geometry).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::live::Live;
use crate::config::{default_of, reload_effect, Config, Reload};
use crate::control::{EvacuationStatus, Setting};
use crate::units::human_bytes;
use crate::volume::Tier;

/// Load the configuration again; `Err` is a message.
pub type ReloadFn = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;
/// Apply a log level; `Err` says why not.
pub type LogLevelFn = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Whether `key` may change while the daemon runs.
pub fn is_live(key: &str) -> bool {
    key.starts_with("migrate.")
        || matches!(
            key,
            "heat.sequential-cutoff" | "log-level" | "reserve" | "durability.ssd-exposure"
        )
}

/// What the daemon keeps in the metadata store for the operator: the live
/// settings and the tier being drained.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// `tierctl config set` values.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// `tierctl evacuate` in force.
    #[serde(default)]
    pub evacuate: Option<Tier>,
}

struct State {
    /// The tier being drained and its data (extents) when draining started.
    evacuate: Option<(Tier, u64)>,
    /// As loaded from defaults, file, environment and flags.
    base: Config,
    /// Live settings, persisted in the metadata store.
    live: BTreeMap<String, String>,
    /// `base` with `live` over it.
    in_force: Config,
}

/// The configuration of a running daemon.
pub struct Settings {
    state: Mutex<State>,
    reload: Option<ReloadFn>,
    set_log_level: Option<LogLevelFn>,
}

impl Settings {
    /// Settings over `base` with the live settings `saved` (from the
    /// metadata store); a saved setting that no longer applies (not a live
    /// key, or no longer valid) is dropped with a warning.
    pub fn new(
        base: Config,
        saved: Saved,
        reload: Option<ReloadFn>,
        set_log_level: Option<LogLevelFn>,
    ) -> Settings {
        let mut live = BTreeMap::new();
        let mut in_force = base.clone();
        for (k, v) in saved.settings {
            if !is_live(&k) {
                warn!(key = %k, "a saved live setting names a key that cannot change live; ignored");
                continue;
            }
            match in_force.overridden(&[(k.clone(), v.clone())]) {
                Ok(c) => {
                    in_force = c;
                    live.insert(k, v);
                }
                Err(e) => warn!(key = %k, "a saved live setting is no longer valid ({e}); ignored"),
            }
        }
        if !live.is_empty() {
            info!(settings = ?live, "live settings from `tierctl config set` are in force over the configuration (undo with `tierctl config reset KEY`)");
        }
        Settings {
            state: Mutex::new(State {
                evacuate: saved.evacuate.map(|t| (t, 0)),
                base,
                live,
                in_force,
            }),
            reload,
            set_log_level,
        }
    }

    /// The saved live settings of a volume (empty when none or unreadable,
    /// with a warning).
    pub fn saved(vol: &crate::volume::Volume) -> Saved {
        match vol.load_settings() {
            Ok(None) => Saved::default(),
            Ok(Some(raw)) => serde_json::from_slice(&raw).unwrap_or_else(|e| {
                warn!("the saved live settings do not parse ({e}); ignored");
                Saved::default()
            }),
            Err(e) => {
                warn!("reading the saved live settings: {e}; ignored");
                Saved::default()
            }
        }
    }

    /// The tier being drained, if any.
    pub fn evacuating(&self) -> Option<Tier> {
        self.state.lock().evacuate.map(|e| e.0)
    }

    /// Drain `tier` (`None`: stop draining), saved so a restart keeps it.
    pub fn evacuate(&self, live: &Live, tier: Option<Tier>) -> Result<String, String> {
        let mut st = self.state.lock();
        if st.evacuate.map(|e| e.0) == tier {
            return Err(match tier {
                Some(t) => {
                    format!("the {t} is being drained already (tierctl status shows how far)")
                }
                None => "no tier is being drained".into(),
            });
        }
        let vol = &live.volume;
        // Checked before the setting is saved, so a refusal saves nothing.
        vol.may_set_evacuating(tier).map_err(|e| e.to_string())?;
        Self::persist(live, &st.live, tier)?;
        vol.set_evacuating(tier).map_err(|e| e.to_string())?;
        // Counted as the plan counts: the tier's data.
        st.evacuate = tier.map(|t| (t, super::evacuation::plan(live, t).data_extents));
        live.wake();
        Ok(match tier {
            Some(t) => {
                info!(tier = %t, "draining started by the operator");
                format!("draining the {t}: new data goes to the other tier, and the migrator moves what is there")
            }
            None => {
                info!("draining cancelled by the operator");
                "draining cancelled: placement follows the policy again".into()
            }
        })
    }

    /// How draining stands (`None`: no tier is drained).
    pub fn evacuation(&self, live: &Live) -> Option<EvacuationStatus> {
        let mut st = self.state.lock();
        let (tier, started) = st.evacuate?;
        let mut e = super::evacuation::plan(live, tier);
        // After a restart the start is unknown: the first look sets it.
        e.started_extents = started.max(e.remaining_extents);
        st.evacuate = Some((tier, e.started_extents));
        e.active = true;
        Some(e)
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        self.state.lock().in_force.clone()
    }

    /// The live settings in force.
    pub fn live_settings(&self) -> BTreeMap<String, String> {
        self.state.lock().live.clone()
    }

    /// Every key with its value in force, default and source. The paths
    /// that follow from the data directory when unset (`ssd`, `hdd`,
    /// `meta-dir`, `control`) show the path in effect; an unset optional
    /// key and a key without a default are `""`.
    pub fn show(&self) -> Vec<Setting> {
        let st = self.state.lock();
        let cfg = &st.in_force;
        let raw = cfg.values();
        cfg.effective_values()
            .into_iter()
            .zip(raw)
            .map(|((k, value), (_, v))| {
                let source = if st.live.contains_key(k) {
                    "tierctl"
                } else {
                    source_of_value(k, &v)
                };
                Setting {
                    key: k.to_string(),
                    value,
                    default: default_of(k).unwrap_or_default(),
                    live: is_live(k),
                    source: source.into(),
                }
            })
            .collect()
    }

    /// Apply the changes from `old` to `new` to the running daemon; returns
    /// the keys applied. `live_reserve` is the reserve setting to follow
    /// (`None`: back to the geometry's).
    fn apply(
        &self,
        live: &Live,
        old: &Config,
        new: &Config,
        live_reserve: Option<&str>,
    ) -> Result<Vec<&'static str>, String> {
        let diff = new.changed_keys(old);
        let mut applied = Vec::new();
        if diff.iter().any(|k| k.starts_with("migrate.")) {
            live.migrator.set_config(new.migrate);
            if new.migrate.enabled && live.worker.lock().is_none() {
                match live.migrator.spawn() {
                    Ok(h) => *live.worker.lock() = Some(h),
                    Err(e) => warn!("starting the migration thread: {e}"),
                }
            }
            live.wake();
            applied.extend(diff.iter().filter(|k| k.starts_with("migrate.")));
        }
        if diff.contains(&"durability.ssd-exposure") {
            live.migrator
                .set_exposure_bound(new.durability.ssd_exposure);
            live.wake();
            applied.push("durability.ssd-exposure");
        }
        if diff.contains(&"heat.sequential-cutoff") {
            live.heat
                .set_sequential_cutoff(new.heat.sequential_cutoff.0);
            applied.push("heat.sequential-cutoff");
        }
        if diff.contains(&"log-level") {
            match self.set_log_level.as_ref().map(|set| set(&new.log_level)) {
                Some(Ok(())) => applied.push("log-level"),
                Some(Err(e)) => warn!("log-level not changed: {e}"),
                None => warn!("log-level changed but cannot be applied live: restart tierd"),
            }
        }
        let target = reserve_target(live, new, live_reserve)?;
        if target != live.migrator.reserve_extents() {
            live.migrator.set_reserve_extents(target);
            live.wake();
            applied.push("reserve");
        }
        Ok(applied)
    }

    /// Persist the live settings and the drained tier in the volume's
    /// metadata store.
    fn persist(
        live: &Live,
        settings: &BTreeMap<String, String>,
        evacuate: Option<Tier>,
    ) -> Result<(), String> {
        let saved = Saved {
            settings: settings.clone(),
            evacuate,
        };
        let raw = serde_json::to_vec(&saved).map_err(|e| e.to_string())?;
        live.volume
            .save_settings(&raw)
            .map_err(|e| format!("saving the live settings: {e}"))
    }

    /// Put `settings` in force in place of the live settings: only the
    /// live keys change (restart-only keys stay as in force); checked,
    /// saved, then applied, so what is in force is what is saved.
    fn commit(
        &self,
        live: &Live,
        st: &mut State,
        settings: BTreeMap<String, String>,
    ) -> Result<(), String> {
        let pairs: Vec<(String, String)> = settings.clone().into_iter().collect();
        let candidate = st.base.overridden(&pairs).map_err(|e| e.to_string())?;
        let new = with_live_keys(&st.in_force, &candidate, true);
        let reserve = settings.get("reserve").map(String::as_str);
        reserve_target(live, &new, reserve)?;
        Self::persist(live, &settings, st.evacuate.map(|e| e.0))?;
        self.apply(live, &st.in_force, &new, reserve)?;
        st.live = settings;
        st.in_force = new;
        Ok(())
    }

    /// `tierctl config set KEY VALUE`: validate, apply, persist. Returns
    /// what was done.
    pub fn set(&self, live: &Live, key: &str, value: &str) -> Result<String, String> {
        if !crate::config::is_key(key) {
            let unknown = crate::config::UnknownKey::new(key, crate::config::Origin::Given);
            return Err(format!("{unknown} (tierctl config show lists every key)"));
        }
        if !is_live(key) {
            let when = match reload_effect(key) {
                Reload::Format => "it is fixed when a volume is formatted",
                _ => "it takes effect only at a restart: put it in the configuration file",
            };
            return Err(format!("{key} cannot change live: {when}"));
        }
        if key == "log-level" && self.set_log_level.is_none() {
            return Err("this process cannot change its log level live (RUST_LOG is set)".into());
        }
        let mut st = self.state.lock();
        let mut settings = st.live.clone();
        settings.insert(key.to_string(), value.to_string());
        let old_value = shown_value(live, &st.in_force, key);
        self.commit(live, &mut st, settings)?;
        let now = shown_value(live, &st.in_force, key);
        info!(key, from = %old_value, to = %now, "live setting changed by the operator");
        Ok(format!(
            "{key} = {now} (was {old_value}); saved: it stays over the configuration until `tierctl config reset {key}`"
        ))
    }

    /// `tierctl config reset KEY`: drop a live setting; the configuration's
    /// value comes back.
    pub fn reset(&self, live: &Live, key: &str) -> Result<String, String> {
        if !crate::config::is_key(key) {
            let unknown = crate::config::UnknownKey::new(key, crate::config::Origin::Given);
            return Err(format!("{unknown} (tierctl config show lists every key)"));
        }
        let mut st = self.state.lock();
        if !st.live.contains_key(key) {
            return Err(format!(
                "{key} has no live setting (tierctl config show: source tierctl)"
            ));
        }
        let mut settings = st.live.clone();
        settings.remove(key);
        self.commit(live, &mut st, settings)?;
        let now = shown_value(live, &st.in_force, key);
        info!(key, to = %now, "live setting reset by the operator");
        let from = match source_of_value(key, &value_of(&st.in_force, key)) {
            "default" => "the default",
            _ => "the configuration",
        };
        Ok(format!("{key} reset: {now} from {from}"))
    }

    /// Load the configuration again (SIGHUP, `tierctl reload`) and apply
    /// what can change live; live settings stay over it. `Err` (the old
    /// configuration stays) says why.
    pub fn reload(&self, live: &Live) -> Result<String, String> {
        let Some(load) = &self.reload else {
            return Err("this process cannot reload its configuration".into());
        };
        let base = load()
            .map_err(|e| format!("configuration not reloaded, the old one stays in force: {e}"))?;
        let mut st = self.state.lock();
        let pairs: Vec<(String, String)> = st.live.clone().into_iter().collect();
        let new = base.overridden(&pairs).map_err(|e| {
            format!("the live settings do not fit the new configuration ({e}); the old one stays in force")
        })?;
        let diff = new.changed_keys(&st.in_force);
        // Keys a live setting holds are not the file's to change.
        let held: Vec<&str> = base
            .changed_keys(&st.in_force)
            .into_iter()
            .filter(|k| st.live.contains_key(*k))
            .collect();
        // Only the keys that follow the file live change; the others stay
        // as they are in force, so they are reported again on the next
        // reload until the restart.
        let next = with_live_keys(&st.in_force, &new, false);
        let reserve = st.live.get("reserve").map(String::as_str);
        let applied = self.apply(live, &st.in_force, &next, reserve)?;
        let effect = |want: Reload| -> Vec<&str> {
            diff.iter()
                .copied()
                .filter(|k| !follows_file(k) && reload_effect(k) == want)
                .collect()
        };
        let (restart, format_only) = (effect(Reload::Restart), effect(Reload::Format));
        st.base = base;
        st.in_force = next;
        let mut msg = if applied.is_empty() {
            "configuration reloaded; nothing that applies live changed".to_string()
        } else {
            format!("configuration reloaded; applied live: {}", list(&applied))
        };
        info!(applied = ?applied, "configuration reloaded");
        if !held.is_empty() {
            warn!(keys = ?held, "reload: these keys have live settings, which stay in force (tierctl config reset KEY)");
            msg.push_str(&format!(
                "; held by live settings, which stay in force until `tierctl config reset KEY`: {}",
                list(&held)
            ));
        }
        if !restart.is_empty() {
            warn!(keys = ?restart, "reload: {}", restart_note(&restart));
            msg.push_str(&format!(
                "; changed but need a restart to take effect: {}",
                list(&restart)
            ));
        }
        if !format_only.is_empty() {
            warn!(keys = ?format_only, "reload: these keys apply only when a volume is formatted; the running volume keeps its geometry (use `tierctl config set reserve SIZE` for a live reserve target)");
            msg.push_str(&format!(
                "; changed but apply only when a volume is formatted: {}",
                list(&format_only)
            ));
        }
        Ok(msg)
    }
}

/// `in_force` with the live keys taken from `from` (the reserve too with
/// `reserve`): restart-only and format-only keys stay as they are in force.
fn with_live_keys(in_force: &Config, from: &Config, reserve: bool) -> Config {
    let mut next = in_force.clone();
    next.migrate = from.migrate;
    next.durability = from.durability;
    next.heat.sequential_cutoff = from.heat.sequential_cutoff;
    next.log_level = from.log_level.clone();
    if reserve {
        next.reserve = from.reserve;
    }
    next
}

/// The reserve target (extents) `new` asks for: the live setting's when
/// there is one, else the geometry's; refused beyond the SSD.
fn reserve_target(live: &Live, new: &Config, live_reserve: Option<&str>) -> Result<u64, String> {
    let geo = live.volume.geometry();
    let es = geo.extent_size;
    let extents = match (live_reserve, new.reserve) {
        (Some(_), Some(b)) => b.0.div_ceil(es),
        _ => u64::from(geo.reserve_extents),
    };
    let ssd = u64::from(geo.ssd_slots);
    if extents > ssd {
        return Err(format!(
            "reserve {} is more than the SSD's {} of extent slots",
            human_bytes(extents * es),
            human_bytes(ssd * es)
        ));
    }
    Ok(extents)
}

/// What a reload says of keys that changed but take effect only after a
/// restart; why, for the `[heat]` keys (the heat map is built when the
/// volume opens), only when one of them is among them.
fn restart_note(keys: &[&str]) -> String {
    let mut s = "these changes take effect only after a restart".to_string();
    if keys.iter().any(|k| k.starts_with("heat.")) {
        s.push_str(" (the [heat] half-life and windows are fixed when the volume opens)");
    }
    s
}

/// Keys a reload takes from the file into the running daemon.
fn follows_file(key: &str) -> bool {
    key.starts_with("migrate.") || matches!(key, "heat.sequential-cutoff" | "log-level")
}

/// The value of `key` in force as a message shows it: an unset reserve
/// is the volume's own, fixed at format; another unset key is `none`.
fn shown_value(live: &Live, cfg: &Config, key: &str) -> String {
    let v = value_of(cfg, key);
    if !v.is_empty() {
        return v;
    }
    if key == "reserve" {
        let geo = live.volume.geometry();
        let bytes = u64::from(geo.reserve_extents) * geo.extent_size;
        return format!("the format-time reserve, {}", human_bytes(bytes));
    }
    "none".into()
}

/// Keys for a person: `a`, `a and b`, `a, b and c`.
fn list(keys: &[&str]) -> String {
    match keys {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Where a value not set live comes from, as `tierctl config show` says
/// it: `default` when it is the built-in default, else `configuration`
/// (the file, the environment or a flag).
fn source_of_value(key: &str, value: &str) -> &'static str {
    if value_of(&Config::default(), key) == value {
        "default"
    } else {
        "configuration"
    }
}

fn value_of(cfg: &Config, key: &str) -> String {
    cfg.values()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::list;

    #[test]
    fn a_restart_note_speaks_of_heat_only_for_heat_keys() {
        use super::restart_note;
        assert!(!restart_note(&["listen"]).contains("heat"));
        assert!(!restart_note(&["listen", "export-name"]).contains("half-life"));
        assert!(restart_note(&["heat.half-life"]).contains("[heat] half-life"));
        assert!(restart_note(&["listen", "heat.idle-after"]).contains("[heat]"));
    }

    #[test]
    fn keys_read_as_a_list_in_prose() {
        assert_eq!(list(&[]), "");
        assert_eq!(list(&["reserve"]), "reserve");
        assert_eq!(list(&["a", "b"]), "a and b");
        assert_eq!(list(&["a", "b", "c"]), "a, b and c");
    }
}
