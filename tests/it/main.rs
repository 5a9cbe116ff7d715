mod catalog_api;
mod cli;
mod local_store;
mod memory_store;
mod rest_server;
mod rest_smoke;
mod slt;
mod support;
