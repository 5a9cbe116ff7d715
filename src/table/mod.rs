//! Table providers: `t$rt` (the union read) and the write target that sends
//! DML on lake-stream tables to their store.

mod factory;
mod maintenance;
mod plain;
mod realtime;
mod tier;
mod write;

pub(crate) use factory::{PaimonTableFactory, PAIMON_FORMAT};
pub(crate) use maintenance::{Maintenance, MaintenanceFunction};
pub(crate) use plain::PaimonWriteTable;
pub(crate) use realtime::RealtimeTable;
pub(crate) use tier::{SetAsideFunction, TierFunction, SET_ASIDE_FUNCTION, TIER_FUNCTION};
pub(crate) use write::{RowChange, StoreWriteTable};
