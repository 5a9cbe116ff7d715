//! The lake-stream table a procedure's first argument names.

use std::sync::Arc;

use datafusion::catalog::TableFunctionArgs;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result as DFResult};
use paimon::catalog::{Catalog as _, Identifier};

use crate::catalog::LakeStreamCatalog;
use crate::error::Error;
use crate::table::LakeStreamSession;

/// The lake-stream table a procedure's name argument names.
pub(super) fn resolve(
    session: &LakeStreamSession,
    args: &TableFunctionArgs,
    function: &str,
    name: &str,
) -> DFResult<Target> {
    let config = args.session().config_options();
    let lookup = |parts: &[String]| -> DFResult<_> {
        let reference = match parts {
            [catalog, schema, table] => {
                TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
            }
            [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
            [table] => TableReference::bare(table.as_str()),
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "{function}: '{name}' is not a table name"
                )))
            }
        };
        Ok(session.resolve(&reference, config))
    };
    // The name is parsed as SQL parses names: quoted parts keep their case
    // and dots, unquoted ones are lower-cased.
    let parts = crate::name::parse_table_name(name).map_err(Error::from)?;
    let (catalog, identifier) = lookup(&parts)?.ok_or_else(|| {
        DataFusionError::Plan(format!(
            "{function}: '{name}' is not a table of a lake-stream catalog"
        ))
    })?;
    // SQLContext keeps an unquoted name's case (`CREATE TABLE Ev` makes
    // `Ev`): that spelling is the second choice.
    let kept = crate::name::parse_table_name_keeping_case(name).map_err(Error::from)?;
    let as_written = match lookup(&kept)? {
        Some((other, written)) if kept != parts && Arc::ptr_eq(&other, &catalog) => Some(written),
        _ => None,
    };
    Ok(Target {
        catalog,
        identifier,
        as_written,
    })
}

/// The lake-stream table a procedure names: the name as SQL reads it, or,
/// when no table has that name, as it was written.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) catalog: Arc<LakeStreamCatalog>,
    identifier: Identifier,
    as_written: Option<Identifier>,
}

impl Target {
    /// The table, decided when the procedure runs.
    pub(super) async fn identifier(&self) -> Identifier {
        if let Some(written) = &self.as_written {
            let missing = matches!(
                self.catalog.get_table(&self.identifier).await,
                Err(paimon::Error::TableNotExist { .. })
            );
            if missing && self.catalog.get_table(written).await.is_ok() {
                return written.clone();
            }
        }
        self.identifier.clone()
    }

    /// The table as SQL reads the name, for plans.
    pub(super) fn name(&self) -> String {
        self.identifier.full_name()
    }
}
