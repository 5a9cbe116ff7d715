mod catalog_api;
mod cli;
mod crash;
mod docs;
mod durability;
mod embed;
mod faults;
#[cfg(feature = "fluss")]
mod fluss;
mod history;
mod local_store;
mod memory_store;
mod rest_server;
mod rest_smoke;
mod shell;
mod slt;
mod support;
mod text_input;
