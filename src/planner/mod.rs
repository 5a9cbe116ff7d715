//! Planning-time routing: the statement filter in front of `SQLContext::sql`,
//! the relation planner that serves `t$rt`, the analyzer rule that sends
//! writes of lake-stream tables to their store.

pub(crate) mod classify;
pub(crate) mod history;
pub(crate) mod parsed;
pub(crate) mod relation;
pub(crate) mod statement;
pub(crate) mod travel;
pub(crate) mod write;
