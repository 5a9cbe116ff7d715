mod catalog_api;
mod cli;
mod rest_server;
mod rest_smoke;
mod slt;
mod support;
