//! Table providers: `t$rt` (the union read) and the write target that sends
//! DML on lake-stream tables to their store; with what they read of the
//! session: its lake-stream catalogs ([`LakeStreamSession`]) and its read
//! settings ([`config::LakeStreamConfig`]).

pub(crate) mod config;
mod factory;
mod plain;
mod realtime;
mod session;
mod write;

pub(crate) use factory::{PaimonTableFactory, PAIMON_FORMAT};
pub(crate) use plain::PaimonWriteTable;
pub(crate) use realtime::RealtimeTable;
pub(crate) use session::{full_name, LakeStreamSession};
pub(crate) use write::{RowChange, StoreWriteTable};
