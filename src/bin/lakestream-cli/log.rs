//! The shell's logger: what the library logs at `info` or above (the
//! background tierer's failures and recoveries, see
//! [`paimon_lakestream::store::local::TIERING_LOG`]; new Fluss tables the
//! store had to create again, target `paimon_lakestream::fluss`) goes to
//! stderr, one line each, as `Warning: ...` or `Info: ...`, beside the
//! shell's own `Error: ...` lines. Other crates' logs (DataFusion's,
//! Paimon's) are left out.

use std::io::IsTerminal;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Whether a record is the library's and at least `info`.
fn shown(metadata: &Metadata<'_>) -> bool {
    metadata.level() <= Level::Info
        && (metadata.target() == "paimon_lakestream"
            || metadata.target().starts_with("paimon_lakestream::"))
}

/// The line a record is printed as.
pub fn line(record: &Record<'_>) -> String {
    let level = match record.level() {
        Level::Error => "Error",
        Level::Warn => "Warning",
        Level::Info => "Info",
        Level::Debug => "Debug",
        Level::Trace => "Trace",
    };
    format!("{level}: {}", record.args())
}

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        shown(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !shown(record.metadata()) {
            return;
        }
        // On a terminal, the line first clears the one it lands on (the
        // shell's progress line of a running statement, redrawn after).
        let line = if std::io::stderr().is_terminal() {
            format!("\r\x1b[2K{}\n", line(record))
        } else {
            format!("{}\n", line(record))
        };
        eprint!("{line}");
    }

    fn flush(&self) {}
}

/// Installs the shell's logger, unless the process has one already.
pub fn install() {
    static LOGGER: Stderr = Stderr;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_crates_reports_are_shown_as_lines_of_their_level() {
        let ours = Metadata::builder()
            .target("paimon_lakestream::tiering")
            .level(Level::Warn)
            .build();
        let debug = Metadata::builder()
            .target("paimon_lakestream::tiering")
            .level(Level::Debug)
            .build();
        let theirs = Metadata::builder()
            .target("datafusion::physical_planner")
            .level(Level::Warn)
            .build();
        let lookalike = Metadata::builder()
            .target("paimon_lakestreamer")
            .level(Level::Warn)
            .build();
        assert!(shown(&ours));
        assert!(!shown(&debug));
        assert!(!shown(&theirs));
        assert!(!shown(&lookalike));
        let record = Record::builder()
            .target("paimon_lakestream::tiering")
            .level(Level::Warn)
            .args(format_args!("background tiering of 't' failed"))
            .build();
        assert_eq!(line(&record), "Warning: background tiering of 't' failed");
    }
}
