//! The pieces `lakestream-cli` is made of: splitting scripts into statements
//! and commands, running them, printing results and errors. Public so an app
//! can build its own shell from them. Behind the cargo feature `cli` (on by
//! default), which brings clap and rustyline.

pub mod command;
pub mod errors;
pub mod log;
pub mod print;
pub mod runner;
pub mod script;
pub mod shell;
