mod catalog_api;
mod cli;
mod crash;
mod docs;
mod embed;
#[cfg(feature = "fluss")]
mod fluss;
mod local_store;
mod memory_store;
mod merge_engines;
mod rest_server;
mod rest_smoke;
mod shell;
mod slt;
mod support;
