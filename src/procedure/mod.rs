//! Every procedure of this crate, in one place: its name, its arguments,
//! the columns of its answer, and its run. Each is a table function
//! (`SELECT * FROM lakestream_tier('db.t')`), registered in every session
//! with the lake-stream hooks ([`register`]); `CALL [catalog.][sys.]name(...)`
//! in `LakeStreamContext` becomes a query of it ([`call_query`]). The planner
//! only looks procedures up here.
//!
//! Planning a procedure's query runs nothing: its plan runs the procedure
//! when executed ([`plan`]). So `EXPLAIN CALL ...` shows the plan and
//! changes nothing, while `EXPLAIN ANALYZE CALL ...`, which executes the
//! plan, runs the procedure (docs/maintenance.md).
//!
//! - [`store`]: the store's `lakestream_tier` and `lakestream_set_aside`.
//! - [`maintenance`]: Paimon's maintenance procedures, on any Paimon table
//!   of a lake-stream catalog.

mod call;
mod maintenance;
mod plan;
mod store;
mod target;

use std::sync::Arc;

use datafusion::catalog::TableFunctionImpl;
use datafusion::prelude::SessionContext;

pub(crate) use call::call_query;
use maintenance::{Maintenance, MaintenanceFunction};
use store::{SetAsideFunction, TierFunction};

use crate::table::LakeStreamSession;

/// A procedure of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Procedure {
    /// `lakestream_tier`: the store tiers a table's rows into Paimon now.
    Tier,
    /// `lakestream_set_aside`: the store moves a damaged segment aside.
    SetAside,
    /// One of Paimon's maintenance procedures.
    Maintenance(Maintenance),
}

impl Procedure {
    /// Every procedure, in the order they are registered.
    const ALL: [Procedure; 7] = [
        Procedure::Tier,
        Procedure::SetAside,
        Procedure::Maintenance(Maintenance::CompactManifest),
        Procedure::Maintenance(Maintenance::Compact),
        Procedure::Maintenance(Maintenance::ExpireSnapshots),
        Procedure::Maintenance(Maintenance::RemoveOrphanFiles),
        Procedure::Maintenance(Maintenance::CreateTag),
    ];

    /// The name it is called and registered under.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Procedure::Tier => store::TIER,
            Procedure::SetAside => store::SET_ASIDE,
            Procedure::Maintenance(maintenance) => maintenance.name(),
        }
    }

    /// The procedure called `name` (any ASCII case).
    pub(crate) fn named(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|procedure| procedure.name().eq_ignore_ascii_case(name))
    }

    /// Whether it acts on the store's rows (the classification's store
    /// procedures) rather than on Paimon's files.
    pub(crate) fn is_store(self) -> bool {
        matches!(self, Procedure::Tier | Procedure::SetAside)
    }

    /// Paimon's names of its arguments after the table, in order: `CALL`'s
    /// named arguments become positional ones in this order. Empty for the
    /// store's procedures, which take theirs by position.
    pub(crate) fn named_arguments(self) -> &'static [&'static str] {
        match self {
            Procedure::Tier | Procedure::SetAside => &[],
            Procedure::Maintenance(maintenance) => maintenance.arguments(),
        }
    }

    /// Its table function, resolving table names in `session`.
    fn function(self, session: Arc<LakeStreamSession>) -> Arc<dyn TableFunctionImpl> {
        match self {
            Procedure::Tier => Arc::new(TierFunction::new(session)),
            Procedure::SetAside => Arc::new(SetAsideFunction::new(session)),
            Procedure::Maintenance(maintenance) => {
                Arc::new(MaintenanceFunction::new(session, maintenance))
            }
        }
    }
}

/// Registers every procedure's table function in `ctx`.
pub(crate) fn register(ctx: &SessionContext, session: &Arc<LakeStreamSession>) {
    for procedure in Procedure::ALL {
        ctx.register_udtf(procedure.name(), procedure.function(Arc::clone(session)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_procedure_is_listed_once_and_found_by_name() {
        for procedure in Procedure::ALL {
            assert_eq!(
                Procedure::ALL.iter().filter(|p| **p == procedure).count(),
                1
            );
            let name = procedure.name().to_ascii_uppercase();
            assert_eq!(Procedure::named(&name), Some(procedure));
        }
        for maintenance in Maintenance::ALL {
            assert!(Procedure::ALL.contains(&Procedure::Maintenance(maintenance)));
        }
        assert_eq!(Procedure::named("rollback_to"), None);
    }
}
