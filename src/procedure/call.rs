//! `CALL [catalog.][sys.]procedure(...)` as the query of the procedure's
//! table function, `SELECT * FROM procedure(...)`: the table argument first
//! (Paimon names it, `table => 'db.t'`), then Paimon's named arguments in
//! the procedure's order ([`Procedure::named_arguments`]).

use std::sync::OnceLock;

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, SetExpr, Statement, TableFactor, TableFunctionArgs, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::Procedure;
use crate::error::{Error, Result};
use crate::name;

/// `CALL [catalog.][sys.]lakestream_tier('db.t')` as the query of its table
/// function. With a catalog part, the table argument is read in that
/// catalog: `CALL c.sys.lakestream_tier('db.t')` tiers `c.db.t`.
/// `None` for a procedure not of this crate.
pub(crate) fn call_query(function: &Function, default_schema: &str) -> Result<Option<Statement>> {
    let parts: Vec<&Ident> = function
        .name
        .0
        .iter()
        .filter_map(ObjectNamePart::as_ident)
        .collect();
    let (catalog, name) = match parts.as_slice() {
        [name] => (None, *name),
        [sys, name] if sys.value.eq_ignore_ascii_case("sys") => (None, *name),
        [catalog, sys, name] if sys.value.eq_ignore_ascii_case("sys") => (Some(*catalog), *name),
        _ => return Ok(None),
    };
    let Some(found) = Procedure::named(&name.value) else {
        return Ok(None);
    };
    let procedure = found.name();
    let mut args = function.args.clone();
    // Paimon names the table argument: `table => 'db.t'` is the first one.
    if let FunctionArguments::List(list) = &mut args {
        for arg in &mut list.args {
            if let FunctionArg::Named {
                name, arg: value, ..
            } = arg
            {
                if name.value.eq_ignore_ascii_case("table") {
                    *arg = FunctionArg::Unnamed(value.clone());
                }
            }
        }
    }
    // Paimon's named arguments of `expire_snapshots` and
    // `remove_orphan_files` become positional ones, in the table function's
    // order, NULL where not given.
    let names = found.named_arguments();
    if !names.is_empty() {
        if let FunctionArguments::List(list) = &mut args {
            let mut positional: Vec<Option<FunctionArg>> = vec![None; names.len() + 1];
            let mut next = 0;
            for arg in list.args.drain(..) {
                match arg {
                    FunctionArg::Named { name, arg, .. } => {
                        let Some(at) = names
                            .iter()
                            .position(|n| n.eq_ignore_ascii_case(&name.value))
                        else {
                            return Err(Error::InvalidStatement {
                                statement: format!("CALL sys.{procedure}"),
                                reason: format!(
                                    "unknown argument '{}'; it takes table, {}",
                                    name.value,
                                    names.join(", ")
                                ),
                            });
                        };
                        if positional[at + 1]
                            .replace(FunctionArg::Unnamed(arg))
                            .is_some()
                        {
                            return Err(Error::InvalidStatement {
                                statement: format!("CALL sys.{procedure}"),
                                reason: format!("argument '{}' is given twice", name.value),
                            });
                        }
                    }
                    other => {
                        if next < positional.len() {
                            positional[next] = Some(other);
                        }
                        next += 1;
                    }
                }
            }
            let null = || {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(
                    Value::Null.with_empty_span(),
                )))
            };
            let last = positional.iter().rposition(Option::is_some).unwrap_or(0);
            list.args = positional
                .into_iter()
                .take(last + 1)
                .map(|arg| arg.unwrap_or_else(null))
                .collect();
        }
    }
    if let (Some(catalog), FunctionArguments::List(list)) = (catalog, &mut args) {
        if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))) =
            list.args.first_mut()
        {
            if let Value::SingleQuotedString(table) = &mut value.value {
                let qualified = match name::parse_table_name_keeping_case(table)?.len() {
                    1 => format!("{catalog}.{}.{table}", name::sql_name(&[default_schema])),
                    2 => format!("{catalog}.{table}"),
                    _ => table.clone(),
                };
                *table = qualified;
            }
        }
    }
    let args = match args {
        FunctionArguments::List(list) => list.args,
        FunctionArguments::None => Vec::new(),
        FunctionArguments::Subquery(_) => {
            return Err(Error::InvalidStatement {
                statement: format!("CALL sys.{procedure}"),
                reason: "it takes arguments, not a query".to_string(),
            })
        }
    };
    table_function_query(procedure, args).map(Some)
}

/// `SELECT * FROM procedure(args)`, as a tree: the query a procedure call
/// becomes. Built on a template parsed once per process, not on text.
fn table_function_query(procedure: &str, args: Vec<FunctionArg>) -> Result<Statement> {
    static TEMPLATE: OnceLock<Option<Statement>> = OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        Parser::parse_sql(&GenericDialect {}, "SELECT * FROM f()")
            .ok()
            .and_then(|mut statements| statements.pop())
    });
    let unexpected = || {
        Error::Internal("the query template of procedure calls does not parse as one".to_string())
    };
    let mut statement = template.clone().ok_or_else(unexpected)?;
    let Statement::Query(query) = &mut statement else {
        return Err(unexpected());
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(unexpected());
    };
    let Some(TableFactor::Table {
        name,
        args: table_args,
        ..
    }) = select.from.first_mut().map(|from| &mut from.relation)
    else {
        return Err(unexpected());
    };
    *name = ObjectName::from(vec![Ident::new(procedure)]);
    *table_args = Some(TableFunctionArgs {
        args,
        settings: None,
    });
    Ok(statement)
}
