//! The option contract: which options make a table lake-stream, which store a
//! catalog names, and which catalog options reach that store; and the Paimon
//! catalog a set of catalog options opens, once they are checked.
//!
//! Routing reads only the options stored in the catalog (table options from the
//! table's schema, catalog options from registration). Nothing here looks at
//! session options; [`reject_session_key`] is what refuses them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::error::{Error, Result};

/// Table option that turns lake-stream mode on (`true`, ignoring ASCII case).
pub const ENABLED: &str = "lakestream.enabled";
/// Table option recording which store serves a lake-stream table, set when
/// the mode is turned on (`<store>:<location>`, e.g.
/// `local:file:///data/_lakestream/`). A catalog whose store is another one
/// refuses to serve the table. Not set by users.
pub(crate) const STORE_BINDING: &str = "lakestream.store-binding";
/// Catalog option naming the store (`local`, `fluss`, ...).
pub const STORE: &str = "lakestream.store";
/// Catalog option bounding each store call (creation, attach, planning a
/// read, acknowledging a write): a duration such as `30s`, `500ms`, `2min`.
pub const TIMEOUT: &str = "lakestream.timeout";
/// Catalog option bounding each procedure run as a whole (`CALL
/// sys.lakestream_tier`, `lakestream_set_aside`, the maintenance procedures,
/// `lakestream-cli tier`): a duration, or `off` (the default) for no bound.
/// Their store calls are not bounded by [`TIMEOUT`]: a procedure's work
/// grows with the table, a store call's does not.
pub const PROCEDURE_TIMEOUT: &str = "lakestream.procedure-timeout";
/// Table option naming the maintenance that runs after the store's tiering
/// rounds that commit: a comma-separated list of Paimon's procedure names
/// `compact`, `compact_manifest` and `expire_snapshots`, or `all` (the
/// default) or `none`. See [`AutoMaintenance`].
pub const MAINTENANCE: &str = "lakestream.maintenance";
/// Prefix of every lake-stream key.
pub const PREFIX: &str = "lakestream.";

/// The lake-stream table options; any other `lakestream.*` table option is
/// refused.
const KNOWN_TABLE_KEYS: &[&str] = &[ENABLED, STORE_BINDING, MAINTENANCE];

/// Which maintenance runs after a tiering round that committed, as the
/// table's [`MAINTENANCE`] option says. Paimon's `write-only` = `true` turns
/// all of it off, whatever this says; the procedures run on request
/// whatever either says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoMaintenance {
    /// Data-file compaction (`compact`).
    pub compact: bool,
    /// Manifest compaction (`compact_manifest`).
    pub compact_manifest: bool,
    /// Snapshot expiry (`expire_snapshots`).
    pub expire_snapshots: bool,
}

impl AutoMaintenance {
    /// Everything: the default.
    pub const ALL: Self = Self {
        compact: true,
        compact_manifest: true,
        expire_snapshots: true,
    };
    /// Nothing.
    pub const NONE: Self = Self {
        compact: false,
        compact_manifest: false,
        expire_snapshots: false,
    };

    /// Reads a value of [`MAINTENANCE`]; the error says what is wrong.
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        let words: Vec<String> = value
            .split(',')
            .map(|word| word.trim().to_ascii_lowercase())
            .collect();
        let usage = "write a comma-separated list of compact, compact_manifest and \
                     expire_snapshots, or all, or none";
        match words.as_slice() {
            [one] if one == "all" => return Ok(Self::ALL),
            [one] if one == "none" => return Ok(Self::NONE),
            _ => {}
        }
        let mut chosen = Self::NONE;
        for word in &words {
            let slot = match word.as_str() {
                "compact" => &mut chosen.compact,
                "compact_manifest" => &mut chosen.compact_manifest,
                "expire_snapshots" => &mut chosen.expire_snapshots,
                "all" | "none" => {
                    return Err(format!("'{word}' cannot be combined with others; {usage}"))
                }
                "" => return Err(format!("'{value}' names an empty item; {usage}")),
                other => return Err(format!("'{other}' is not a maintenance; {usage}")),
            };
            *slot = true;
        }
        Ok(chosen)
    }

    /// What the options of table `table` (its full name) say.
    pub fn of_table(table: &str, options: &HashMap<String, String>) -> Result<Self> {
        match options.get(MAINTENANCE) {
            None => Ok(Self::ALL),
            Some(value) => Self::parse(value).map_err(|reason| Error::InvalidOption {
                key: MAINTENANCE.to_string(),
                reason: format!("table '{table}' sets it to '{value}': {reason}"),
            }),
        }
    }
}

/// Checks the lake-stream options a `CREATE TABLE` or `ALTER TABLE` of
/// `table` (its full name) sets: the known ones with a valid value, no
/// other `lakestream.*` key.
pub fn check_table_option(table: &str, key: &str, value: &str) -> Result<()> {
    if !is_lakestream_key(key) {
        return Ok(());
    }
    if !KNOWN_TABLE_KEYS.contains(&key) {
        return Err(Error::InvalidOption {
            key: key.to_string(),
            reason: format!(
                "table '{table}': it is not a lake-stream table option; the known ones are: {}{}",
                KNOWN_TABLE_KEYS.join(", "),
                if KNOWN_CATALOG_KEYS
                    .iter()
                    .any(|known| known.eq_ignore_ascii_case(key))
                {
                    format!(". '{key}' is a catalog option: set it on the catalog")
                } else {
                    String::new()
                }
            ),
        });
    }
    if key == MAINTENANCE {
        AutoMaintenance::parse(value).map_err(|reason| Error::InvalidOption {
            key: key.to_string(),
            reason: format!("table '{table}' sets it to '{value}': {reason}"),
        })?;
    }
    Ok(())
}

/// The default of [`TIMEOUT`].
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The catalog options this crate knows under [`PREFIX`].
const KNOWN_CATALOG_KEYS: &[&str] = &[STORE, TIMEOUT, PROCEDURE_TIMEOUT];

/// Whether a value of [`ENABLED`] turns the mode on: exactly `true`, ignoring
/// ASCII case. Anything else, including `yes`, ` true` and the empty string, is off.
pub(crate) fn is_enabled_value(value: &str) -> bool {
    value.eq_ignore_ascii_case("true")
}

/// Whether a table's stored options make it a lake-stream table.
pub(crate) fn is_enabled<'a, I>(table_options: I) -> bool
where
    I: IntoIterator<Item = (&'a String, &'a String)>,
{
    table_options
        .into_iter()
        .any(|(key, value)| key == ENABLED && is_enabled_value(value))
}

/// Whether `key` belongs to the lake-stream contract (`lakestream.*`), compared
/// ignoring ASCII case so that `LakeStream.Enabled` cannot slip past a check.
pub(crate) fn is_lakestream_key(key: &str) -> bool {
    let key = key.trim().trim_matches(['\'', '"', '`']);
    strip_prefix_ignore_ascii_case(key, PREFIX).is_some()
}

/// `text` without `prefix`, compared ignoring ASCII case; `None` when `text`
/// does not start with it. Never slices inside a character: option keys and
/// names are user text, in any script.
pub(crate) fn strip_prefix_ignore_ascii_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    let rest = text.get(prefix.len()..)?;
    head.eq_ignore_ascii_case(prefix).then_some(rest)
}

/// The lake-stream part of a catalog's options: the store it names, and the
/// options forwarded to that store with the `<identifier>.` prefix stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogStoreOptions {
    store: Option<String>,
    store_options: BTreeMap<String, String>,
    timeout: Duration,
    procedure_timeout: Option<Duration>,
}

impl Default for CatalogStoreOptions {
    fn default() -> Self {
        Self {
            store: None,
            store_options: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            procedure_timeout: None,
        }
    }
}

impl CatalogStoreOptions {
    /// Reads `lakestream.store` and the `<store>.<key>` options from a catalog's options.
    ///
    /// Keys for other stores are left alone: they are not this store's business.
    pub fn from_catalog_options(options: &HashMap<String, String>) -> Result<Self> {
        for key in options.keys() {
            if is_lakestream_key(key) && !KNOWN_CATALOG_KEYS.contains(&key.as_str()) {
                return Err(Error::InvalidOption {
                    key: key.clone(),
                    reason: format!(
                        "it is not a catalog option; the known lake-stream catalog options are: {}. \
                         'lakestream.enabled' is a table option: set it on the table",
                        KNOWN_CATALOG_KEYS.join(", ")
                    ),
                });
            }
        }
        crate::object_storage::check_options(options)?;
        let timeout = match options.get(TIMEOUT) {
            Some(text) => parse_timeout(text).map_err(|reason| Error::InvalidOption {
                key: TIMEOUT.to_string(),
                reason,
            })?,
            None => DEFAULT_TIMEOUT,
        };
        let procedure_timeout = match options.get(PROCEDURE_TIMEOUT) {
            Some(text) => parse_procedure_timeout(text).map_err(|reason| Error::InvalidOption {
                key: PROCEDURE_TIMEOUT.to_string(),
                reason,
            })?,
            None => None,
        };
        let Some(store) = options.get(STORE) else {
            return Ok(Self {
                timeout,
                procedure_timeout,
                ..Self::default()
            });
        };
        validate_store_identifier(store)?;
        let prefix = format!("{store}.");
        let mut store_options = BTreeMap::new();
        for (key, value) in options {
            let Some(stripped) = key.strip_prefix(&prefix) else {
                continue;
            };
            if stripped.trim().is_empty() {
                return Err(Error::InvalidOption {
                    key: key.clone(),
                    reason: format!(
                        "the key after the store prefix '{prefix}' is empty; write '{prefix}<key>'"
                    ),
                });
            }
            store_options.insert(stripped.to_string(), value.clone());
        }
        Ok(Self {
            store: Some(store.clone()),
            store_options,
            timeout,
            procedure_timeout,
        })
    }

    /// A catalog naming `store`, with `store_options` (prefix already stripped).
    pub fn for_store(store: &str, store_options: BTreeMap<String, String>) -> Result<Self> {
        validate_store_identifier(store)?;
        Ok(Self {
            store: Some(store.to_string()),
            store_options,
            ..Self::default()
        })
    }

    /// The store identifier the catalog names, if any.
    pub fn store(&self) -> Option<&str> {
        self.store.as_deref()
    }

    /// Options for the store, prefix stripped.
    pub fn store_options(&self) -> &BTreeMap<String, String> {
        &self.store_options
    }

    /// The bound on each store call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The bound on each procedure run as a whole ([`PROCEDURE_TIMEOUT`]);
    /// `None`: no bound.
    pub fn procedure_timeout(&self) -> Option<Duration> {
        self.procedure_timeout
    }
}

/// The Paimon catalog that `options` (`warehouse`, `metastore`, `uri`, ...)
/// describe, for both `register_catalog`s. The lake-stream options among them
/// are checked first: a bad one touches nothing, not even the warehouse.
pub(crate) async fn create_paimon_catalog(
    options: &HashMap<String, String>,
) -> Result<std::sync::Arc<dyn paimon::catalog::Catalog>> {
    CatalogStoreOptions::from_catalog_options(options)?;
    if let Some(warehouse) = options.get("warehouse") {
        crate::object_storage::refuse_credentials_in_url("warehouse", warehouse)?;
    }
    Ok(paimon::CatalogFactory::create(paimon::Options::from_map(options.clone())).await?)
}

/// Parses [`PROCEDURE_TIMEOUT`]: `off` (no bound), or a duration above zero.
fn parse_procedure_timeout(text: &str) -> std::result::Result<Option<Duration>, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let timeout = parse_duration(text).map_err(|e| format!("{e}, or 'off' for no bound"))?;
    if timeout.is_zero() {
        return Err(format!(
            "'{text}' is no time: every procedure would stop at once; give a duration above \
             zero, or 'off' (the default) for no bound"
        ));
    }
    Ok(Some(timeout))
}

/// Parses [`TIMEOUT`]: a duration above zero (every store call would fail
/// at once with zero).
fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err(format!(
            "'{text}' is no time: every store call would fail at once; give a duration above \
             zero, e.g. '30s' (the default)"
        ));
    }
    Ok(timeout)
}

/// Parses a duration: a whole number followed by `ms`, `s`, `min` or `h`
/// (spaces allowed in between); a bare number is milliseconds.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let millis = parse_quantity(
        text,
        &[
            ("", 1),
            ("ms", 1),
            ("s", 1_000),
            ("sec", 1_000),
            ("min", 60_000),
            ("h", 3_600_000),
        ],
    )
    .ok_or_else(|| {
        format!("'{text}' is not a duration; write e.g. '500ms', '30s', '2min' or '1h'")
    })?;
    Ok(Duration::from_millis(millis))
}

/// A whole number followed by one of `units` (case-insensitive, spaces
/// allowed in between), times that unit's factor; `None` on anything else,
/// overflow included.
fn parse_quantity(text: &str, units: &[(&str, u64)]) -> Option<u64> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: u64 = number.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let (_, factor) = units.iter().find(|(name, _)| *name == unit)?;
    value.checked_mul(*factor)
}

/// Parses a size in bytes: a whole number followed by nothing or `b`
/// (bytes), `kb`, `mb` or `gb` (powers of 1024, as Paimon's sizes; `kib`,
/// `mib` and `gib` too), spaces allowed in between.
pub(crate) fn parse_size(text: &str) -> std::result::Result<u64, String> {
    const KB: u64 = 1 << 10;
    const MB: u64 = 1 << 20;
    const GB: u64 = 1 << 30;
    parse_quantity(
        text,
        &[
            ("", 1),
            ("b", 1),
            ("k", KB),
            ("kb", KB),
            ("kib", KB),
            ("m", MB),
            ("mb", MB),
            ("mib", MB),
            ("g", GB),
            ("gb", GB),
            ("gib", GB),
        ],
    )
    .ok_or_else(|| format!("'{text}' is not a size; write e.g. '32mb', '512kb' or '1048576'"))
}

/// A store identifier is a plain word: letters, digits, `_` and `-`.
fn validate_store_identifier(store: &str) -> Result<()> {
    let valid = !store.is_empty()
        && store
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            key: STORE.to_string(),
            reason: format!(
                "'{store}' is not a store identifier (letters, digits, '_' or '-', e.g. 'local' or 'fluss'); \
                 leave the option out for a catalog without a store"
            ),
        })
    }
}

/// Refuses a session, dynamic or hint option that names a `lakestream.*` key:
/// routing follows the table's stored options only.
pub(crate) fn reject_session_key(key: &str, origin: &str) -> Result<()> {
    if is_lakestream_key(key) {
        return Err(Error::SessionRouting {
            key: key.to_string(),
            origin: origin.to_string(),
        });
    }
    Ok(())
}

/// A map of options from pairs, for tests.
#[cfg(test)]
pub(crate) fn map_of<M: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> M {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        map_of(pairs)
    }

    #[test]
    fn enabled_only_for_true_ignoring_ascii_case() {
        for on in ["true", "TRUE", "True", "tRuE"] {
            assert!(is_enabled_value(on), "{on}");
        }
        for off in [
            "",
            " ",
            "yes",
            "1",
            "on",
            "false",
            " true",
            "true ",
            "truee",
            "ｔｒｕｅ",
            "t",
        ] {
            assert!(!is_enabled_value(off), "{off:?}");
        }
    }

    #[test]
    fn enabled_reads_the_exact_key() {
        assert!(!is_enabled(&opts(&[])));
        assert!(is_enabled(&opts(&[("lakestream.enabled", "TRUE")])));
        assert!(!is_enabled(&opts(&[("lakestream.enabled", "false")])));
        assert!(!is_enabled(&opts(&[("lakestream.enabled", "")])));
        // Keys are case-sensitive like every Paimon option.
        assert!(!is_enabled(&opts(&[("LAKESTREAM.ENABLED", "true")])));
        assert!(!is_enabled(&opts(&[("lakestream.enabled ", "true")])));
    }

    #[test]
    fn lakestream_keys_are_recognised_in_any_spelling() {
        assert!(is_lakestream_key("lakestream.enabled"));
        assert!(is_lakestream_key("'LakeStream.Store'"));
        assert!(is_lakestream_key(" lakestream.x "));
        assert!(!is_lakestream_key("lakestream"));
        assert!(!is_lakestream_key("scan.snapshot-id"));
        assert!(!is_lakestream_key(""));
    }

    #[test]
    fn non_ascii_keys_are_text_not_bytes() {
        // Each of these once sliced a character in two (issue 9, case 7).
        for key in [
            "ééééééé",
            "aaaaaaaaaaé",
            "lakestreaméé",
            "lakestream\u{300}.x",
            "\"ééééééé\"",
            "ｌａｋｅｓｔｒｅａｍ.enabled",
        ] {
            assert!(!is_lakestream_key(key), "{key}");
            reject_session_key(key, "SET").unwrap();
        }
        assert!(is_lakestream_key("lakestream.é"));
        assert!(reject_session_key("LakeStream.é", "SET").is_err());
        let parsed = CatalogStoreOptions::from_catalog_options(&opts(&[
            ("aaaaaaaaaaé", "1"),
            ("ééééééé", "é"),
        ]))
        .unwrap();
        assert_eq!(parsed.store(), None);
        assert_eq!(
            strip_prefix_ignore_ascii_case("paimon.é", "PAIMON."),
            Some("é")
        );
        assert_eq!(strip_prefix_ignore_ascii_case("ééééé", "paimon."), None);
        assert_eq!(strip_prefix_ignore_ascii_case("pa", "paimon."), None);
    }

    #[test]
    fn no_store_when_absent() {
        let parsed = CatalogStoreOptions::from_catalog_options(&opts(&[
            ("warehouse", "/tmp/w"),
            ("fluss.bootstrap.servers", "h:1"),
        ]))
        .unwrap();
        assert_eq!(parsed.store(), None);
        assert!(parsed.store_options().is_empty());
    }

    #[test]
    fn forwards_only_the_named_store_prefix_stripped() {
        let parsed = CatalogStoreOptions::from_catalog_options(&opts(&[
            ("lakestream.store", "fluss"),
            ("fluss.bootstrap.servers", "h:1"),
            ("fluss.client.timeout", "5s"),
            ("local.path", "/x"),
            ("flussy.a", "b"),
            ("warehouse", "/w"),
        ]))
        .unwrap();
        assert_eq!(parsed.store(), Some("fluss"));
        let forwarded: Vec<_> = parsed
            .store_options()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            forwarded,
            vec![("bootstrap.servers", "h:1"), ("client.timeout", "5s")]
        );
    }

    #[test]
    fn prefix_only_key_is_an_error_for_the_named_store() {
        let err = CatalogStoreOptions::from_catalog_options(&opts(&[
            ("lakestream.store", "fluss"),
            ("fluss.", "x"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("'fluss.'"), "{err}");
        assert!(err.contains("empty"), "{err}");
        // For another store it is not ours to judge.
        CatalogStoreOptions::from_catalog_options(&opts(&[
            ("lakestream.store", "local"),
            ("fluss.", "x"),
        ]))
        .unwrap();
    }

    #[test]
    fn bad_store_identifiers_are_errors() {
        for bad in ["", " ", "lo cal", "a.b", " local", "local\n"] {
            let err =
                CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.store", bad)]))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains("lakestream.store"), "{err}");
        }
    }

    #[test]
    fn unknown_lakestream_catalog_keys_are_errors() {
        let err =
            CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.enabled", "true")]))
                .unwrap_err()
                .to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        assert!(err.contains("table option"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32mb"), Ok(32 << 20));
        assert_eq!(parse_size(" 512 KB"), Ok(512 << 10));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("7b"), Ok(7));
        for bad in [
            "",
            "mb",
            "-1mb",
            "1.5mb",
            "1 tb",
            "99999999999999999999gb",
            "1e3",
            "1ｍb",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration(" 500 ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
        for bad in [
            "",
            "s",
            "-1s",
            "1.5s",
            "1 day",
            "99999999999999999999h",
            "1e3",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let parsed =
            CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.timeout", "2s")]))
                .unwrap();
        assert_eq!(parsed.timeout(), Duration::from_secs(2));
        let err =
            CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.timeout", "soon")]))
                .unwrap_err()
                .to_string();
        assert!(err.contains("lakestream.timeout"), "{err}");
    }

    #[test]
    fn the_procedure_timeout_is_off_or_a_duration_above_zero() {
        let parsed = |value: &str| {
            CatalogStoreOptions::from_catalog_options(&opts(&[(
                "lakestream.procedure-timeout",
                value,
            )]))
        };
        let unset = CatalogStoreOptions::from_catalog_options(&opts(&[])).unwrap();
        assert_eq!(unset.procedure_timeout(), None);
        assert_eq!(parsed("off").unwrap().procedure_timeout(), None);
        assert_eq!(parsed(" OFF ").unwrap().procedure_timeout(), None);
        assert_eq!(
            parsed("2min").unwrap().procedure_timeout(),
            Some(Duration::from_secs(120))
        );
        // Its own bound: the store-call bound stays as it was.
        assert_eq!(parsed("1ms").unwrap().timeout(), DEFAULT_TIMEOUT);
        for bad in ["0", "0s", "soon", "-1s", ""] {
            let err = parsed(bad).unwrap_err().to_string();
            assert!(err.contains("lakestream.procedure-timeout"), "{bad}: {err}");
            assert!(err.contains("'off'"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_zero_timeout_is_refused_naming_the_option() {
        // Zero cannot work: every store call would time out at once.
        for zero in ["0", "0s", "0 ms", "00min"] {
            let err =
                CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.timeout", zero)]))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains("lakestream.timeout"), "{zero}: {err}");
            assert!(err.contains("above zero"), "{zero}: {err}");
        }
        let parsed =
            CatalogStoreOptions::from_catalog_options(&opts(&[("lakestream.timeout", "1ms")]))
                .unwrap();
        assert_eq!(parsed.timeout(), Duration::from_millis(1));
    }

    /// Option text: keys and values with dots, quotes, `$`, `=`, whitespace
    /// and letters of several scripts, around the prefixes this module reads.
    fn option_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop_oneof![
                Just("lakestream.".to_string()),
                Just("LakeStream".to_string()),
                Just("local.".to_string()),
                Just("fluss.".to_string()),
                Just("paimon.".to_string()),
                Just(".".to_string()),
                Just("$".to_string()),
                Just("=".to_string()),
                Just("'".to_string()),
                Just("\"".to_string()),
                Just("`".to_string()),
                Just(" ".to_string()),
                Just("é".to_string()),
                Just("\u{301}".to_string()),
                Just("ｔｒｕｅ".to_string()),
                Just("true".to_string()),
                "[a-z0-9_-]{1,4}",
                "\\PC{1,3}",
            ],
            0..8,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn option_parsing_never_panics(
            pairs in proptest::collection::vec((option_text(), option_text()), 0..6),
            store in proptest::option::of(option_text()),
        ) {
            for (key, value) in &pairs {
                let lakestream = is_lakestream_key(key);
                proptest::prop_assert_eq!(reject_session_key(key, "SET").is_err(), lakestream);
                let _ = is_enabled_value(value);
                let _ = parse_duration(value);
                let _ = parse_size(value);
            }
            let mut options: HashMap<String, String> = pairs.into_iter().collect();
            if let Some(store) = store {
                options.insert(STORE.to_string(), store);
            }
            let _ = is_enabled(&options);
            if let Ok(parsed) = CatalogStoreOptions::from_catalog_options(&options) {
                // What reaches a store is what its prefix named.
                if let Some(store) = parsed.store() {
                    for key in parsed.store_options().keys() {
                        let full = format!("{store}.{key}");
                        proptest::prop_assert!(options.contains_key(&full));
                    }
                }
            }
        }

        #[test]
        fn maintenance_values_parse_back(
            chosen in proptest::collection::vec(
                proptest::sample::select(vec!["compact", "compact_manifest", "expire_snapshots"]),
                1..4,
            ),
            upper in proptest::bool::ANY,
            noise in option_text(),
        ) {
            // Any list of the names, any case, any spacing, repeats allowed.
            let text = chosen
                .iter()
                .map(|name| if upper { name.to_ascii_uppercase() } else { name.to_string() })
                .collect::<Vec<_>>()
                .join(" , ");
            let parsed = AutoMaintenance::parse(&text);
            proptest::prop_assert_eq!(
                parsed,
                Ok(AutoMaintenance {
                    compact: chosen.contains(&"compact"),
                    compact_manifest: chosen.contains(&"compact_manifest"),
                    expire_snapshots: chosen.contains(&"expire_snapshots"),
                })
            );
            // Any other text parses or says why, never panics.
            if let Err(reason) = AutoMaintenance::parse(&noise) {
                proptest::prop_assert!(reason.contains("compact_manifest"), "{}", reason);
            }
            let _ = check_table_option("db.t", &noise, &noise);
        }

        #[test]
        fn any_text_is_an_option_key_or_not(key in "\\PC{0,30}") {
            let _ = is_lakestream_key(&key);
            let _ = parse_duration(&key);
            let _ = strip_prefix_ignore_ascii_case(&key, PREFIX);
        }
    }

    #[test]
    fn maintenance_option_values() {
        assert_eq!(AutoMaintenance::parse("all"), Ok(AutoMaintenance::ALL));
        assert_eq!(AutoMaintenance::parse(" NONE "), Ok(AutoMaintenance::NONE));
        assert_eq!(
            AutoMaintenance::parse("expire_snapshots"),
            Ok(AutoMaintenance {
                expire_snapshots: true,
                ..AutoMaintenance::NONE
            })
        );
        for bad in [
            "",
            "compact,",
            "all,compact",
            "vacuum",
            "compact;expire_snapshots",
        ] {
            assert!(AutoMaintenance::parse(bad).is_err(), "{bad}");
        }
        let none = opts(&[]);
        assert_eq!(
            AutoMaintenance::of_table("db.t", &none).unwrap(),
            AutoMaintenance::ALL
        );
        let err = AutoMaintenance::of_table("db.t", &opts(&[(MAINTENANCE, "x")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lakestream.maintenance") && err.contains("db.t"),
            "{err}"
        );
    }

    #[test]
    fn lake_stream_table_options_are_checked() {
        check_table_option("db.t", "bucket", "anything").unwrap();
        check_table_option("db.t", ENABLED, "true").unwrap();
        check_table_option("db.t", MAINTENANCE, "compact").unwrap();
        let err = check_table_option("db.t", "lakestream.maintainance", "none")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a lake-stream table option"), "{err}");
        let err = check_table_option("db.t", "LakeStream.Enabled", "true")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        let err = check_table_option("db.t", TIMEOUT, "5s")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a catalog option"), "{err}");
    }

    #[test]
    fn session_keys_are_refused() {
        assert!(reject_session_key("paimon.scan.snapshot-id", "SET").is_ok());
        let err = reject_session_key("lakestream.enabled", "SET")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        assert!(err.contains("stored options"), "{err}");
    }
}
