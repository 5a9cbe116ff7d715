mod catalog_api;
mod cli;
mod memory_store;
mod rest_server;
mod rest_smoke;
mod slt;
mod support;
