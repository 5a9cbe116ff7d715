//! Planning-time routing: the statement filter in front of `SQLContext::sql`.

pub(crate) mod statement;
