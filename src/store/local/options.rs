//! The `local` store's options (`local.<key>` of a catalog), their
//! defaults and bounds, and where a catalog's store keeps its files.
//!
//! Every key is checked here, once: an unknown key or a value out of bounds
//! is an error naming `local.<key>`, before anything is opened.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{root, LOCAL};
use crate::error::{Error, Result};
use crate::object_storage::S3Options;
use crate::options::{parse_duration, parse_size};
use crate::store::StoreContext;

const PATH: &str = "path";
const TIER_INTERVAL: &str = "tier-interval";
const TIER_TARGET_SIZE: &str = "tier-target-size";
const TIER_MAX_DELAY: &str = "tier-max-delay";
const TIER_MAX_ROWS: &str = "tier-max-rows";
const LOG_RETENTION: &str = "log-retention";
const SEGMENT_SIZE: &str = "segment-size";
const LEASE_TTL: &str = "lease-ttl";
const KNOWN_OPTIONS: &[&str] = &[
    PATH,
    TIER_INTERVAL,
    TIER_TARGET_SIZE,
    TIER_MAX_DELAY,
    TIER_MAX_ROWS,
    LOG_RETENTION,
    SEGMENT_SIZE,
    LEASE_TTL,
];
/// A holder renews every third of its lease: below this, renewals would
/// crowd out the requests they protect.
const MIN_LEASE_TTL: Duration = Duration::from_secs(3);
/// Big enough that a part's fixed costs (a put, an fsync) are small beside
/// its rows; small enough that a write, a read and a tiering each hold a
/// few of them at once well within memory.
const DEFAULT_SEGMENT_SIZE: u64 = 32 << 20;
/// Long enough for a streaming read to ride out a pause, and for any write
/// to finish well within it (see `table/commit.rs`: a write never lands below the
/// tiered position while it is younger than half of this).
const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(600);
const MIN_LOG_RETENTION: Duration = Duration::from_secs(1);
/// Short enough that a table reaching its target size is tiered within
/// seconds; a check is a listing of the log and a look at the newest
/// snapshot, cheap beside the round it may start.
const DEFAULT_TIER_INTERVAL: Duration = Duration::from_secs(5);
/// A round commits one snapshot (a manifest and at least one data file per
/// bucket written). This much of the store's (uncompressed Arrow) segments
/// makes Parquet files up to the size Paimon's writers aim for anyway
/// (`target-file-size`: 128 MB for primary-key tables, 256 MB for append
/// tables), so rounds no longer leave a trail of small files and manifests;
/// more would only lengthen the backlog every `t$rt` read goes through.
const DEFAULT_TIER_TARGET_SIZE: u64 = 128 << 20;
/// Fluss's default lake freshness (`table.datalake.freshness`) is 3
/// minutes; `t$rt` serves the rows meanwhile, so Paimon readers of `t`
/// alone see rows at most this much later (plus one check interval).
const DEFAULT_TIER_MAX_DELAY: Duration = Duration::from_secs(180);
const DEFAULT_TIER_MAX_ROWS: u64 = 2_000_000;

/// Options of the `local` store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOptions {
    /// Where the store keeps its files: a path or a URL.
    pub path: String,
    /// How often the writing process checks whether a table is due for
    /// tiering (see `tier_target_size`, `tier_max_delay`); `None`: no
    /// background tiering, only on demand.
    pub tier_interval: Option<Duration>,
    /// The background tierer tiers once the store holds this many bytes
    /// (on disk) of rows Paimon lacks ...
    pub tier_target_size: u64,
    /// ... or once the oldest of them has waited this long.
    pub tier_max_delay: Duration,
    /// Rows per tiering commit, at most (whole segments are never split).
    pub tier_max_rows: u64,
    /// How long segments stay after tiering passed them: streaming reads
    /// that fall behind by less go on from the log.
    pub log_retention: Duration,
    /// Bytes of rows (in memory) at which a write rolls into a new part.
    pub segment_size: u64,
    /// How long a tierer's lease on an object store (S3) lasts unless
    /// renewed: the longest that tiering, DROP and maintenance of a table
    /// wait for a tierer that died. Unused on local disk (a file lock).
    pub lease_ttl: Duration,
    /// The catalog's S3 options (`s3.endpoint`, keys, ...), for a `path` on
    /// S3: the store's bucket is reached as the warehouse is.
    pub s3: S3Options,
}

impl LocalOptions {
    /// Reads `local.<key>` options (prefix stripped). `warehouse` is the
    /// catalog's warehouse when it is a location (filesystem catalogs), the
    /// default parent of the store's directory.
    pub fn from_options(
        options: &BTreeMap<String, String>,
        warehouse: Option<&str>,
    ) -> Result<Self> {
        let invalid = |key: &str, reason: String| Error::InvalidOption {
            key: format!("{LOCAL}.{key}"),
            reason,
        };
        if let Some(key) = options
            .keys()
            .find(|k| !KNOWN_OPTIONS.contains(&k.as_str()))
        {
            return Err(invalid(
                key,
                format!(
                    "the local store has no such option; it knows: {}",
                    KNOWN_OPTIONS
                        .iter()
                        .map(|k| format!("{LOCAL}.{k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let path = match (options.get(PATH), warehouse) {
            (Some(path), _) if !path.trim().is_empty() => path.clone(),
            (Some(_), _) => return Err(invalid(PATH, "is empty".to_string())),
            (None, Some(warehouse)) => format!("{}/_lakestream", warehouse.trim_end_matches('/')),
            (None, None) => {
                return Err(invalid(
                    PATH,
                    "is needed: the catalog has no warehouse directory to put the store under \
                     (a REST catalog's warehouse is a name, not a directory)"
                        .to_string(),
                ))
            }
        };
        let tier_interval = match options.get(TIER_INTERVAL).map(|v| v.trim()) {
            None => Some(DEFAULT_TIER_INTERVAL),
            Some(off) if off.eq_ignore_ascii_case("off") => None,
            Some(text) => {
                let interval = parse_duration(text).map_err(|r| invalid(TIER_INTERVAL, r))?;
                if interval.is_zero() {
                    return Err(invalid(
                        TIER_INTERVAL,
                        "must be above zero, or 'off'".to_string(),
                    ));
                }
                Some(interval)
            }
        };
        let tier_target_size = match options.get(TIER_TARGET_SIZE) {
            None => DEFAULT_TIER_TARGET_SIZE,
            Some(text) => {
                let size = parse_size(text).map_err(|r| invalid(TIER_TARGET_SIZE, r))?;
                if size == 0 {
                    return Err(invalid(
                        TIER_TARGET_SIZE,
                        "must be above zero ('1b': tier whenever a row waits)".to_string(),
                    ));
                }
                size
            }
        };
        let tier_max_delay = match options.get(TIER_MAX_DELAY) {
            None => DEFAULT_TIER_MAX_DELAY,
            Some(text) => {
                let delay = parse_duration(text).map_err(|r| invalid(TIER_MAX_DELAY, r))?;
                if delay.is_zero() {
                    return Err(invalid(TIER_MAX_DELAY, "must be above zero".to_string()));
                }
                delay
            }
        };
        let tier_max_rows = match options.get(TIER_MAX_ROWS) {
            None => DEFAULT_TIER_MAX_ROWS,
            Some(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    invalid(TIER_MAX_ROWS, format!("'{text}' is not a positive number"))
                })?,
        };
        // A duration of at least `min`, `default` when not given.
        let duration_at_least = |key: &str, default: Duration, min: Duration| {
            let Some(text) = options.get(key) else {
                return Ok(default);
            };
            let duration = parse_duration(text).map_err(|r| invalid(key, r))?;
            if duration < min {
                return Err(invalid(key, format!("must be at least {min:?}")));
            }
            Ok(duration)
        };
        let log_retention =
            duration_at_least(LOG_RETENTION, DEFAULT_LOG_RETENTION, MIN_LOG_RETENTION)?;
        let segment_size = match options.get(SEGMENT_SIZE) {
            None => DEFAULT_SEGMENT_SIZE,
            Some(text) => {
                let size = parse_size(text).map_err(|r| invalid(SEGMENT_SIZE, r))?;
                if size == 0 {
                    return Err(invalid(SEGMENT_SIZE, "must be above zero".to_string()));
                }
                size
            }
        };
        let lease_ttl = duration_at_least(LEASE_TTL, root::DEFAULT_LEASE_TTL, MIN_LEASE_TTL)?;
        Ok(Self {
            path,
            tier_interval,
            tier_target_size,
            tier_max_delay,
            tier_max_rows,
            log_retention,
            segment_size,
            lease_ttl,
            s3: S3Options::default(),
        })
    }
}

/// The `local` store's options in a catalog's store context: `path`
/// defaults under the warehouse of a filesystem catalog.
pub(super) fn local_options(context: &StoreContext) -> Result<LocalOptions> {
    let filesystem = context
        .catalog_options
        .get("metastore")
        .is_none_or(|m| m.eq_ignore_ascii_case("filesystem"));
    let warehouse = context
        .catalog_options
        .get("warehouse")
        .filter(|_| filesystem)
        .map(String::as_str);
    let mut options = LocalOptions::from_options(&context.options, warehouse)?;
    options.s3 = S3Options::from_options(&context.catalog_options);
    Ok(options)
}

/// Where the `local` store of a catalog keeps its files, as a table's store
/// binding records it: the root's URL, without credentials, and for local
/// disk with symbolic links resolved, so two paths to one directory are one
/// store (and two directories are two, whatever their paths look like).
pub(super) fn binding_location(context: &StoreContext) -> Result<String> {
    let options = local_options(context)?;
    let mut url = root::to_url(&options.path)?;
    if let Ok(dir) = url.to_file_path() {
        if let Ok(resolved) = url::Url::from_directory_path(resolve_links(&dir)) {
            url = resolved;
        }
    }
    // Secrets never print: user, password, query and fragment go.
    Ok(root::display_url(&url))
}

/// `dir` with symbolic links resolved as far as it exists: its nearest
/// existing ancestor canonicalized, the rest appended.
fn resolve_links(dir: &std::path::Path) -> std::path::PathBuf {
    let mut rest = Vec::new();
    let mut existing = dir;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            return rest
                .iter()
                .rev()
                .fold(canonical, |path, part| path.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return dir.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::map_of as opts;

    #[test]
    fn options_default_under_the_warehouse() {
        let o = LocalOptions::from_options(&opts(&[]), Some("/w/")).unwrap();
        assert_eq!(o.path, "/w/_lakestream");
        assert_eq!(o.tier_interval, Some(Duration::from_secs(5)));
        assert_eq!(o.tier_target_size, 128 << 20);
        assert_eq!(o.tier_max_delay, Duration::from_secs(180));
        assert_eq!(o.tier_max_rows, 2_000_000);
        assert_eq!(o.log_retention, Duration::from_secs(600));
        assert_eq!(o.segment_size, 32 << 20);
        assert_eq!(o.lease_ttl, Duration::from_secs(30));
        let o = LocalOptions::from_options(
            &opts(&[
                ("path", "memory://x"),
                ("tier-interval", "OFF"),
                ("tier-max-rows", "10"),
                ("tier-target-size", "16kb"),
                ("tier-max-delay", "2min"),
                ("lease-ttl", "5s"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(o.lease_ttl, Duration::from_secs(5));
        assert_eq!(o.path, "memory://x");
        assert_eq!(o.tier_interval, None);
        assert_eq!(o.tier_max_rows, 10);
        assert_eq!(o.tier_target_size, 16 << 10);
        assert_eq!(o.tier_max_delay, Duration::from_secs(120));
    }

    #[test]
    fn bad_options_name_the_key() {
        for (pairs, key) in [
            (vec![("pathh", "x")], "local.pathh"),
            (vec![("path", " ")], "local.path"),
            (vec![("tier-interval", "0s")], "local.tier-interval"),
            (vec![("tier-interval", "soon")], "local.tier-interval"),
            (vec![("tier-max-rows", "0")], "local.tier-max-rows"),
            (vec![("tier-target-size", "0")], "local.tier-target-size"),
            (vec![("tier-target-size", "huge")], "local.tier-target-size"),
            (vec![("tier-target-size", "5s")], "local.tier-target-size"),
            (vec![("tier-max-delay", "0s")], "local.tier-max-delay"),
            (vec![("tier-max-delay", "never")], "local.tier-max-delay"),
            (vec![("tier-max-delay", "64mb")], "local.tier-max-delay"),
            (vec![("log-retention", "500ms")], "local.log-retention"),
            (vec![("log-retention", "later")], "local.log-retention"),
            (vec![("segment-size", "0")], "local.segment-size"),
            (vec![("segment-size", "big")], "local.segment-size"),
            (vec![("lease-ttl", "2s")], "local.lease-ttl"),
            (vec![("lease-ttl", "forever")], "local.lease-ttl"),
        ] {
            let err = LocalOptions::from_options(&opts(&pairs), Some("/w"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{err}");
        }
        let err = LocalOptions::from_options(&opts(&[]), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("warehouse"), "{err}");
        // An unknown option lists the new ones.
        let err = LocalOptions::from_options(&opts(&[("tier-size", "1mb")]), Some("/w"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("local.tier-target-size") && err.contains("local.tier-max-delay"),
            "{err}"
        );
    }
}
