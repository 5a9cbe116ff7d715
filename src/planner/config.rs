//! The session settings of lake-stream reads: `SET lakestream.scan_mode = 'streaming'`.

use std::any::Any;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::error::{DataFusionError, Result as DFResult};

use crate::error::Error;
use crate::store::ScanMode;

const SCAN_MODE: &str = "scan_mode";

/// Session settings under `lakestream.`. Only settings that do not route:
/// where a table's reads and writes go follows its stored options, so any
/// other `lakestream.*` key is refused.
#[derive(Debug, Clone, Default)]
pub struct LakeStreamConfig {
    /// `batch` (default) or `streaming` reads of `t$rt`.
    pub scan_mode: ScanMode,
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
        let err = config.set("enabled", "true").unwrap_err().to_string();
        assert!(err.contains("lakestream.enabled"), "{err}");
        assert!(err.contains("stored options"), "{err}");
    }
}
