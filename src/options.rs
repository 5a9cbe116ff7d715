//! The option contract: which options make a table lake-stream, which store a
//! catalog names, and which catalog options reach that store.
//!
//! Routing reads only the options stored in the catalog (table options from the
//! table's schema, catalog options from registration). Nothing here looks at
//! session options; [`reject_session_key`] is what refuses them.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};

/// Table option that turns lake-stream mode on (`true`, ignoring ASCII case).
pub const ENABLED: &str = "lakestream.enabled";
/// Catalog option naming the store (`local`, `fluss`, ...).
pub const STORE: &str = "lakestream.store";
/// Prefix of every lake-stream key.
pub const PREFIX: &str = "lakestream.";

/// The catalog options this crate knows under [`PREFIX`].
const KNOWN_CATALOG_KEYS: &[&str] = &[STORE];

/// Whether a value of [`ENABLED`] turns the mode on: exactly `true`, ignoring
/// ASCII case. Anything else, including `yes`, ` true` and the empty string, is off.
pub fn is_enabled_value(value: &str) -> bool {
    value.eq_ignore_ascii_case("true")
}

/// Whether a table's stored options make it a lake-stream table.
pub fn is_enabled<'a, I>(table_options: I) -> bool
where
    I: IntoIterator<Item = (&'a String, &'a String)>,
{
    table_options
        .into_iter()
        .any(|(key, value)| key == ENABLED && is_enabled_value(value))
}

/// Whether `key` belongs to the lake-stream contract (`lakestream.*`), compared
/// ignoring ASCII case so that `LakeStream.Enabled` cannot slip past a check.
pub fn is_lakestream_key(key: &str) -> bool {
    let key = key.trim().trim_matches(['\'', '"', '`']);
    key.len() >= PREFIX.len() && key[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
}

/// The lake-stream part of a catalog's options: the store it names, and the
/// options forwarded to that store with the `<identifier>.` prefix stripped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogStoreOptions {
    store: Option<String>,
    store_options: BTreeMap<String, String>,
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
        let Some(store) = options.get(STORE) else {
            return Ok(Self::default());
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
pub fn reject_session_key(key: &str, origin: &str) -> Result<()> {
    if is_lakestream_key(key) {
        return Err(Error::SessionRouting {
            key: key.to_string(),
            origin: origin.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
    fn session_keys_are_refused() {
        assert!(reject_session_key("paimon.scan.snapshot-id", "SET").is_ok());
        let err = reject_session_key("lakestream.enabled", "SET")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        assert!(err.contains("stored options"), "{err}");
    }
}
