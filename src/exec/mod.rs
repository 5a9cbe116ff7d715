//! Execution plans: the union read of `t$rt` and the store sink.

pub(crate) mod realtime;
pub(crate) mod sink;
