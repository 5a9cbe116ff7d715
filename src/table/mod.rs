//! Table providers: `t$rt` (the union read) and the write target that sends
//! DML on lake-stream tables to their store.

mod factory;
mod realtime;
mod tier;
mod write;

pub(crate) use factory::{PaimonTableFactory, PAIMON_FORMAT};
pub(crate) use realtime::RealtimeTable;
pub(crate) use tier::{
    ExpireSnapshotsFunction, Maintenance, MaintenanceFunction, RemoveOrphanFilesFunction,
    SetAsideFunction, TierFunction, EXPIRE_SNAPSHOTS_ARGUMENTS, EXPIRE_SNAPSHOTS_FUNCTION,
    REMOVE_ORPHAN_FILES_ARGUMENTS, REMOVE_ORPHAN_FILES_FUNCTION, SET_ASIDE_FUNCTION, TIER_FUNCTION,
};
pub(crate) use write::{RowChange, StoreWriteTable};
