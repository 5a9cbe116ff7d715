//! Lake-stream mode for Apache Paimon tables in Apache DataFusion.
//!
//! A lake-stream table keeps its name, schema and history in Paimon while a
//! pluggable store takes its writes and serves its newest rows: `t` reads
//! Paimon snapshots, `t$rt` reads the store. See `docs/concepts/lake-stream.md`.

mod batch;
pub mod catalog;
mod classification;
mod clock;
mod context;
pub mod error;
mod exec;
mod extension;
mod failpoint;
pub mod maintenance;
mod merge;
pub mod name;
pub mod notice;
pub mod object_storage;
pub mod options;
pub(crate) mod planner;
mod procedure;
pub mod progress;
mod retry;
mod runtime;
mod schema_stamp;
pub mod store;
mod table;
mod table_cache;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use catalog::LakeStreamCatalog;
pub use context::LakeStreamContext;
pub use error::{Error, ErrorKind, NameError, Result};
pub use extension::LakeStreamExtension;
pub use table::config::LakeStreamConfig;
