//! The pieces `lakestream-cli` is made of: splitting scripts into statements,
//! printing results. Public so an app can build its own shell from them.

pub mod print;
pub mod script;
pub mod shell;
