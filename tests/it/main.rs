mod background_tiering;
mod backlog;
mod branches;
mod catalog_api;
mod cli;
mod compaction_columns;
mod compaction_keys;
mod crash;
mod ddl_races;
mod docs;
mod drops;
mod durability;
mod embed;
mod expire;
mod explain_procedures;
mod faults;
#[cfg(feature = "fluss")]
mod fluss;
#[cfg(feature = "fluss")]
mod fluss_atomicity;
#[cfg(feature = "fluss")]
mod fluss_durability;
#[cfg(feature = "fluss")]
mod fluss_history;
#[cfg(feature = "fluss")]
mod fluss_lifecycle;
#[cfg(feature = "fluss")]
mod fluss_reads;
mod full_disk;
mod history;
mod independent;
mod layers;
mod layouts;
mod lease_races;
mod local_commits;
mod local_store;
mod maintenance;
mod maintenance_orphans;
mod memory_store;
mod merge_engines;
mod multipart;
mod options_reference;
mod procedure_bound;
mod rest_server;
mod rest_smoke;
mod s3;
mod s3_server;
mod shell;
mod sized_tiering;
mod slt;
mod support;
mod table_cache;
mod text_input;
mod twin;
mod union_read;
mod union_read_random;
mod write_names;
