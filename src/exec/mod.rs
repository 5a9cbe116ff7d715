//! Execution plans: the union read of `t$rt` and the store sink.

pub(crate) mod key_map;
pub(crate) mod merge;
pub(crate) mod realtime;
pub(crate) mod sink;
pub(crate) mod touched;
