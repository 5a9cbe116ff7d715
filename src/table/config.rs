//! The session settings of lake-stream reads: `SET lakestream.scan_mode = 'streaming'`.

use std::any::Any;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::error::{DataFusionError, Result as DFResult};

use crate::error::Error;
use crate::store::ScanMode;

const SCAN_MODE: &str = "scan_mode";
const UNION_READ_MEMORY_BUDGET: &str = "union_read_memory_budget";

/// Whether `key` (as `SET` names it, `lakestream.` included) is one of these
/// read settings, which route nothing.
pub(crate) fn is_read_setting(key: &str) -> bool {
    key.split_once('.').is_some_and(|(prefix, name)| {
        prefix.eq_ignore_ascii_case(LakeStreamConfig::PREFIX)
            && [SCAN_MODE, UNION_READ_MEMORY_BUDGET]
                .iter()
                .any(|setting| name.eq_ignore_ascii_case(setting))
    })
}

/// The default value of read setting `key` (as `SET` names it,
/// `lakestream.` included), as `SET` takes it; `None` for other keys.
pub(crate) fn default_of(key: &str) -> Option<String> {
    if !is_read_setting(key) {
        return None;
    }
    let (_, name) = key.split_once('.')?;
    Some(if name.eq_ignore_ascii_case(SCAN_MODE) {
        "batch".to_string()
    } else {
        crate::exec::realtime::DEFAULT_MEMORY_BUDGET.to_string()
    })
}

/// Session settings under `lakestream.`. Only settings that do not route:
/// where a table's reads and writes go follows its stored options, so any
/// other `lakestream.*` key is refused.
#[derive(Debug, Clone, Default)]
pub struct LakeStreamConfig {
    /// `batch` (default) or `streaming` reads of `t$rt`.
    pub scan_mode: ScanMode,
    /// `union_read_memory_budget`: bytes of the store log's batches a
    /// primary-key `t$rt` read keeps in memory; a larger log is read twice
    /// instead. A tuning and test knob, so `SET` takes it but `SHOW` does
    /// not list it; `None` is the default, 64 MiB.
    union_read_memory_budget: Option<usize>,
}

impl LakeStreamConfig {
    /// Bytes of the store log's batches a primary-key `t$rt` read keeps in memory.
    pub(crate) fn union_read_memory_budget(&self) -> usize {
        self.union_read_memory_budget
            .unwrap_or(crate::exec::realtime::DEFAULT_MEMORY_BUDGET)
    }
}

impl ConfigExtension for LakeStreamConfig {
    const PREFIX: &'static str = "lakestream";
}

impl ExtensionOptions for LakeStreamConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> DFResult<()> {
        if key == UNION_READ_MEMORY_BUDGET {
            let bytes = value.trim().parse::<usize>().map_err(|_| {
                DataFusionError::Plan(format!(
                    "invalid value '{value}' for 'lakestream.{UNION_READ_MEMORY_BUDGET}': \
                     use a number of bytes"
                ))
            })?;
            self.union_read_memory_budget = Some(bytes);
            return Ok(());
        }
        if key != SCAN_MODE {
            return Err(Error::SessionRouting {
                key: format!("lakestream.{key}"),
                origin: "SET".to_string(),
            }
            .into());
        }
        self.scan_mode = match value.trim().to_ascii_lowercase().as_str() {
            "batch" => ScanMode::Batch,
            "streaming" => ScanMode::Streaming,
            other => {
                return Err(DataFusionError::Plan(format!(
                    "invalid value '{other}' for 'lakestream.scan_mode': use 'batch' or 'streaming'"
                )))
            }
        };
        Ok(())
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        vec![ConfigEntry {
            key: format!("lakestream.{SCAN_MODE}"),
            value: Some(
                match self.scan_mode {
                    ScanMode::Batch => "batch",
                    ScanMode::Streaming => "streaming",
                }
                .to_string(),
            ),
            description:
                "Reads of t$rt: 'batch' (bounded at planning) or 'streaming' (follows new writes)",
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_mode_is_the_only_setting() {
        let mut config = LakeStreamConfig::default();
        assert_eq!(config.scan_mode, ScanMode::Batch);
        config.set("scan_mode", "STREAMING").unwrap();
        assert_eq!(config.scan_mode, ScanMode::Streaming);
        assert!(config.set("scan_mode", "fast").is_err());
        // The hidden knob: set, never listed.
        config.set("union_read_memory_budget", "4096").unwrap();
        assert_eq!(config.union_read_memory_budget(), 4096);
        assert!(config.set("union_read_memory_budget", "-1").is_err());
        assert_eq!(config.entries().len(), 1);
        let err = config.set("enabled", "true").unwrap_err().to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        assert!(err.contains("stored options"), "{err}");
    }
}
