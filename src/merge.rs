//! A primary-key table's merge settings, as the union read reproduces them.
//!
//! Paimon merges the versions of a key when it reads (and when it flushes a
//! write buffer): which version wins, or how versions combine, is set by the
//! table's `merge-engine`, `sequence.field`, `ignore-delete` and the per-field
//! `fields.*` options. `t$rt` must give the rows Paimon gives after tiering, so
//! the union read merges the store's rows the same way. [`MergeSpec::of`] reads
//! the options into what the union read does, or names the first option it
//! cannot reproduce exactly; turning the mode on is refused for such a table.
//!
//! Supported, for primary-key tables:
//! - `deduplicate` (the default): the newest version wins, a delete removes the key.
//! - `deduplicate` with `sequence.field` (and `sequence.field.sort-order`): the
//!   version with the largest sequence wins, ties by write order.
//! - `partial-update`: each column takes the newest non-null value.
//! - `aggregation` with the functions of [`Aggregate`].
//! - `ignore-delete` (and its aliases): deletes are dropped.
//!
//! Append tables have no merge: their options are not looked at.

use std::collections::HashMap;

use paimon::spec::{CoreOptions, DataField, DataType, VarCharType};

const MERGE_ENGINE: &str = "merge-engine";
const SEQUENCE_FIELD: &str = "sequence.field";
const SEQUENCE_SORT_ORDER: &str = "sequence.field.sort-order";
const IGNORE_DELETE_KEYS: [&str; 4] = [
    "ignore-delete",
    "first-row.ignore-delete",
    "deduplicate.ignore-delete",
    "partial-update.ignore-delete",
];
const FIELDS_PREFIX: &str = "fields.";
const AGGREGATE_FUNCTION_SUFFIX: &str = ".aggregate-function";
const LIST_AGG_DELIMITER_SUFFIX: &str = ".list-agg-delimiter";
const DEFAULT_AGGREGATE_FUNCTION: &str = "fields.default-aggregate-function";

/// How versions of a key combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Engine {
    /// One version wins: the newest, or the one with the largest sequence.
    Deduplicate,
    /// Each column takes the newest non-null value.
    PartialUpdate,
    /// Each value column is aggregated by its function.
    Aggregation,
}

/// An aggregate function of the `aggregation` engine, as Paimon defines it.
/// Only functions whose result does not depend on how Paimon groups rows into
/// commits and files are here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Aggregate {
    /// Integer sum; overflow wraps, as Java's arithmetic does. Nulls are skipped.
    Sum,
    /// Smallest non-null value.
    Min,
    /// Largest non-null value.
    Max,
    /// The last version's value, null included.
    LastValue,
    /// The last non-null value.
    LastNonNullValue,
    /// The first version's value, null included.
    FirstValue,
    /// The first non-null value.
    FirstNonNullValue,
    /// Logical AND of the non-null values.
    BoolAnd,
    /// Logical OR of the non-null values.
    BoolOr,
    /// The non-blank values joined by the delimiter.
    ListAgg {
        /// `fields.<f>.list-agg-delimiter`, `,` by default.
        delimiter: String,
    },
}

/// What the union read does with the versions of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeSpec {
    /// The engine.
    pub(crate) engine: Engine,
    /// `sequence.field`: the columns that order versions (deduplicate only).
    pub(crate) sequence_fields: Vec<String>,
    /// `sequence.field.sort-order` is `descending`: the smallest sequence wins.
    pub(crate) sequence_descending: bool,
    /// `ignore-delete`: deletes are dropped before they merge.
    pub(crate) ignore_delete: bool,
    /// `aggregation`: the function of each value column, by name.
    pub(crate) aggregates: HashMap<String, Aggregate>,
}

/// An option the union read does not reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported {
    /// The option as the user wrote it: `'key'='value'`, or several of them.
    pub(crate) option: String,
    /// Why, and what to do.
    pub(crate) reason: String,
}

fn unsupported(option: String, reason: impl Into<String>) -> Unsupported {
    Unsupported {
        option,
        reason: reason.into(),
    }
}

fn quoted(key: &str, value: &str) -> String {
    format!("'{key}'='{value}'")
}

fn is_boolean(value: &str) -> bool {
    value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false")
}

impl MergeSpec {
    /// The newest version wins: what the union read did before merge engines.
    pub(crate) fn plain() -> Self {
        Self {
            engine: Engine::Deduplicate,
            sequence_fields: Vec::new(),
            sequence_descending: false,
            ignore_delete: false,
            aggregates: HashMap::new(),
        }
    }

    /// Reads a table's merge settings. An append table (no primary key) has
    /// none: its rows are never merged.
    pub(crate) fn of(
        options: &HashMap<String, String>,
        fields: &[DataField],
        primary_keys: &[String],
    ) -> Result<Self, Unsupported> {
        if primary_keys.is_empty() {
            return Ok(Self::plain());
        }
        let engine = engine(options)?;
        check_read_options(options)?;
        let ignore_delete = ignore_delete(options)?;
        let (sequence_fields, sequence_descending) = sequence(options, fields, &engine)?;
        check_namespaced_options(options)?;
        let aggregates = match engine {
            Engine::Aggregation => aggregates(options, fields, primary_keys)?,
            Engine::Deduplicate | Engine::PartialUpdate => {
                check_no_field_options(options, &engine)?;
                HashMap::new()
            }
        };
        Ok(Self {
            engine,
            sequence_fields,
            sequence_descending,
            ignore_delete,
            aggregates,
        })
    }

    /// Why a `DELETE` cannot go to the store for this table, if it cannot:
    /// Paimon would refuse it at tiering, ignore it, or keep a tombstone the
    /// union read cannot see.
    pub(crate) fn delete_refusal(&self) -> Option<String> {
        if self.ignore_delete {
            return Some(
                "the table sets 'ignore-delete'='true' (or one of its aliases), so Paimon drops \
                 deletes and DELETE would change nothing"
                    .to_string(),
            );
        }
        match self.engine {
            Engine::PartialUpdate => Some(
                "'merge-engine'='partial-update' takes no deletes: Paimon refuses them unless \
                 'ignore-delete', 'partial-update.remove-record-on-delete' or sequence groups \
                 are set, and lake-stream tables support only 'ignore-delete' (which drops them)"
                    .to_string(),
            ),
            Engine::Aggregation => Some(
                "'merge-engine'='aggregation' would retract the deleted row's values from the \
                 aggregates instead of removing the key, which lake-stream tables do not support"
                    .to_string(),
            ),
            Engine::Deduplicate if !self.sequence_fields.is_empty() => Some(format!(
                "with {} a delete stays in Paimon as a tombstone that hides later rows with a \
                 smaller sequence, and reads of Paimon cannot see it",
                quoted(SEQUENCE_FIELD, &self.sequence_fields.join(","))
            )),
            Engine::Deduplicate => None,
        }
    }

    /// Why an `UPDATE` cannot go to the store for this table, if it cannot.
    pub(crate) fn update_refusal(&self) -> Option<String> {
        match self.engine {
            Engine::Aggregation => Some(
                "'merge-engine'='aggregation' would aggregate the updated row into the key's \
                 values (a sum would add it again) instead of replacing them; INSERT the change \
                 to aggregate it"
                    .to_string(),
            ),
            Engine::Deduplicate | Engine::PartialUpdate => None,
        }
    }

    /// The option that makes this more than plain `deduplicate` (where the
    /// newest version wins and deletes count), as `'key'='value'`.
    pub(crate) fn beyond_plain(&self, options: &HashMap<String, String>) -> Option<String> {
        let quoted_option = |key: &str| options.get(key).map(|value| quoted(key, value));
        if self.engine != Engine::Deduplicate {
            return quoted_option(MERGE_ENGINE);
        }
        if !self.sequence_fields.is_empty() {
            return quoted_option(SEQUENCE_FIELD);
        }
        if self.ignore_delete {
            return IGNORE_DELETE_KEYS.iter().find_map(|key| quoted_option(key));
        }
        None
    }

    /// A short description for plans: `deduplicate`, `partial-update`, ...
    pub(crate) fn describe(&self) -> String {
        let engine = match self.engine {
            Engine::Deduplicate => "deduplicate",
            Engine::PartialUpdate => "partial-update",
            Engine::Aggregation => "aggregation",
        };
        if self.sequence_fields.is_empty() {
            engine.to_string()
        } else {
            format!(
                "{engine}, sequence.field={}",
                self.sequence_fields.join(",")
            )
        }
    }
}

/// Why changing the table option `key` on a table whose mode is on is
/// refused, if it is: the option fixes what a merge means (engine, deletes,
/// per-field functions), how versions are ordered (`sequence.*`), or how rows
/// are bucketed. Rows the store already holds were written, and Paimon's files
/// merged and bucketed, under the old value, so neither `t$rt` nor tiering
/// could follow a new one. The union read follows none of these changes.
pub(crate) fn change_refusal(key: &str) -> Option<&'static str> {
    let merge_prefixes = [
        "partial-update.",
        "aggregation.",
        "first-row.",
        "deduplicate.",
        FIELDS_PREFIX,
    ];
    if key == MERGE_ENGINE
        || IGNORE_DELETE_KEYS.contains(&key)
        || merge_prefixes.iter().any(|prefix| key.starts_with(prefix))
        || key == "rowkind.field"
        || key == "deletion-vectors.enabled"
    {
        Some(
            "it changes what merging the versions of a key means, and the versions the store \
             holds and the ones Paimon has already merged were written under the old value",
        )
    } else if key.starts_with("sequence.") {
        Some(
            "it changes which version of a key wins, and the versions the store holds and the \
             ones Paimon has already merged were ordered under the old value",
        )
    } else if key == "bucket"
        || key == "bucket-key"
        || key.starts_with("dynamic-bucket.")
        || key == "primary-key"
        || key == "partition"
    {
        Some(
            "it changes the bucket (or partition) of each row, and Paimon's files were written \
             under the old value: tiering the store's rows would conflict with them",
        )
    } else {
        None
    }
}

/// Refuses a table layout whose store rows tiering cannot put into Paimon as
/// the union read shows them: a primary key that leaves out a partition
/// column. With dynamic buckets (`'bucket'='-1'`, the default) Paimon then
/// upserts a key across partitions (its new row deletes the row in the
/// partition it leaves), and its writer takes no change kinds from the
/// caller, so no tiering of such a table commits; with a fixed `bucket`
/// Paimon keeps one row per key and partition while the union read keeps one
/// per key (and Java Paimon refuses the table). A postponed bucket
/// (`'bucket'='-2'`) is refused too: Paimon's batch read skips that bucket
/// until a compaction moves its rows, so tiered rows would not show. Append
/// tables and keys that hold every partition column pass.
pub(crate) fn check_layout(
    options: &HashMap<String, String>,
    primary_keys: &[String],
    partition_keys: &[String],
) -> Result<(), Unsupported> {
    if primary_keys.is_empty() {
        return Ok(());
    }
    let bucket = CoreOptions::new(options).bucket();
    if bucket == paimon::spec::POSTPONE_BUCKET {
        return Err(unsupported(
            quoted("bucket", &bucket.to_string()),
            "Paimon writes a postponed-bucket table's rows to the postponed bucket, which its \
             batch read skips until a compaction assigns them buckets, and nothing here \
             compacts: the tiered rows would not show in the table. Set a fixed 'bucket' or \
             leave it unset",
        ));
    }
    let left_out: Vec<&str> = partition_keys
        .iter()
        .filter(|p| !primary_keys.contains(p))
        .map(String::as_str)
        .collect();
    if left_out.is_empty() {
        return Ok(());
    }
    let option = format!(
        "PRIMARY KEY ({}) with PARTITIONED BY ({})",
        primary_keys.join(", "),
        partition_keys.join(", ")
    );
    let what = if bucket == -1 {
        let set = match options.get("bucket") {
            Some(value) => quoted("bucket", value),
            None => "'bucket'='-1' (the default)".to_string(),
        };
        format!(
            "with {set} Paimon upserts a key across partitions: a key's new row deletes its \
             row in the partition it leaves. Paimon's writer takes no change kinds for such \
             a table, so tiering the store's rows (which carry them) would fail every time \
             and the store would never empty"
        )
    } else {
        format!(
            "with {} Paimon keeps one row per key and partition, while the union read keeps \
             one per key (Java Paimon refuses such a table)",
            quoted("bucket", &bucket.to_string())
        )
    };
    Err(unsupported(
        option,
        format!(
            "the primary key leaves out the partition column(s) {}; {what}. Put every \
             partition column in the primary key",
            left_out.join(", ")
        ),
    ))
}

fn engine(options: &HashMap<String, String>) -> Result<Engine, Unsupported> {
    let Some(value) = options.get(MERGE_ENGINE) else {
        return Ok(Engine::Deduplicate);
    };
    match value.to_ascii_lowercase().as_str() {
        "deduplicate" => Ok(Engine::Deduplicate),
        "partial-update" => Ok(Engine::PartialUpdate),
        "aggregation" => Ok(Engine::Aggregation),
        "first-row" => Err(unsupported(
            quoted(MERGE_ENGINE, value),
            "Paimon's batch read of a first-row table skips level-0 files until a lookup \
             compaction moves them up, and tiering writes level-0 files that nothing here \
             compacts: the tiered rows would not show in the table",
        )),
        _ => Err(unsupported(
            quoted(MERGE_ENGINE, value),
            "Paimon knows no such merge engine",
        )),
    }
}

/// Options that change what a read of Paimon returns, beyond the merge engine.
fn check_read_options(options: &HashMap<String, String>) -> Result<(), Unsupported> {
    let core = CoreOptions::new(options);
    if core.deletion_vectors_enabled() {
        return Err(unsupported(
            quoted(
                "deletion-vectors.enabled",
                options
                    .get("deletion-vectors.enabled")
                    .map_or("true", String::as_str),
            ),
            "Paimon's batch read with deletion vectors skips level-0 files until a compaction \
             moves them up, and tiering writes level-0 files that nothing here compacts: the \
             tiered rows would not show in the table",
        ));
    }
    if let Some(field) = core.rowkind_field() {
        return Err(unsupported(
            quoted("rowkind.field", field),
            "Paimon would take each row's kind from a column's value, which the union read \
             does not interpret",
        ));
    }
    Ok(())
}

fn ignore_delete(options: &HashMap<String, String>) -> Result<bool, Unsupported> {
    for key in IGNORE_DELETE_KEYS {
        if let Some(value) = options.get(key) {
            if !is_boolean(value) {
                return Err(unsupported(
                    quoted(key, value),
                    "the value must be 'true' or 'false'",
                ));
            }
        }
    }
    // Paimon's own reading of the keys and their precedence.
    Ok(CoreOptions::new(options).ignore_delete())
}

fn sequence(
    options: &HashMap<String, String>,
    fields: &[DataField],
    engine: &Engine,
) -> Result<(Vec<String>, bool), Unsupported> {
    for key in options.keys() {
        if key.starts_with("sequence.") && key != SEQUENCE_FIELD && key != SEQUENCE_SORT_ORDER {
            return Err(unsupported(
                quoted(key, &options[key]),
                "the union read reproduces only 'sequence.field' and 'sequence.field.sort-order'",
            ));
        }
    }
    let descending = match options.get(SEQUENCE_SORT_ORDER) {
        None => false,
        Some(order) if order.eq_ignore_ascii_case("ascending") => false,
        Some(order) if order.eq_ignore_ascii_case("descending") => true,
        Some(order) => {
            return Err(unsupported(
                quoted(SEQUENCE_SORT_ORDER, order),
                "the value must be 'ascending' or 'descending'",
            ))
        }
    };
    let Some(value) = options.get(SEQUENCE_FIELD) else {
        return Ok((Vec::new(), descending));
    };
    let names: Vec<String> = value.split(',').map(|s| s.trim().to_string()).collect();
    if let Some(missing) = names
        .iter()
        .find(|name| !fields.iter().any(|f| f.name() == name.as_str()))
    {
        return Err(unsupported(
            quoted(SEQUENCE_FIELD, value),
            format!("the table has no column '{missing}'"),
        ));
    }
    if *engine != Engine::Deduplicate {
        let engine = options.get(MERGE_ENGINE).map_or("", String::as_str);
        return Err(unsupported(
            format!(
                "{} with {}",
                quoted(MERGE_ENGINE, engine),
                quoted(SEQUENCE_FIELD, value)
            ),
            "Paimon keeps one merged row per key and flush, carrying only the largest \
             sequence, so its result depends on how tiering groups rows into commits; only \
             'deduplicate' tables can use 'sequence.field'",
        ));
    }
    Ok((names, descending))
}

/// Options of the merge engines' own namespaces. Only the `ignore-delete`
/// aliases are reproduced; the others (`partial-update.remove-record-on-delete`,
/// `aggregation.remove-record-on-delete`, ...) are refused, whatever the engine.
fn check_namespaced_options(options: &HashMap<String, String>) -> Result<(), Unsupported> {
    let mut keys: Vec<&String> = options.keys().collect();
    keys.sort();
    for key in keys {
        let namespaced = [
            "partial-update.",
            "aggregation.",
            "first-row.",
            "deduplicate.",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix));
        if namespaced && !IGNORE_DELETE_KEYS.contains(&key.as_str()) {
            return Err(unsupported(
                quoted(key, &options[key]),
                "the union read does not reproduce this option; of the merge engines' own \
                 options only the 'ignore-delete' aliases are supported",
            ));
        }
    }
    Ok(())
}

/// `deduplicate` and `partial-update` tables take no per-field options
/// (`fields.<f>.sequence-group`, `fields.<f>.aggregate-function`, ...).
fn check_no_field_options(
    options: &HashMap<String, String>,
    engine: &Engine,
) -> Result<(), Unsupported> {
    let mut keys: Vec<&String> = options
        .keys()
        .filter(|k| k.starts_with(FIELDS_PREFIX))
        .collect();
    keys.sort();
    if let Some(key) = keys.first() {
        let engine = match engine {
            Engine::PartialUpdate => "'merge-engine'='partial-update'",
            _ => "'merge-engine'='deduplicate'",
        };
        return Err(unsupported(
            format!("{engine} with {}", quoted(key, &options[*key])),
            "the union read does not reproduce per-field options (sequence groups, aggregate \
             functions) of this merge engine",
        ));
    }
    Ok(())
}

/// The function of each value column of an `aggregation` table.
fn aggregates(
    options: &HashMap<String, String>,
    fields: &[DataField],
    primary_keys: &[String],
) -> Result<HashMap<String, Aggregate>, Unsupported> {
    // Every `fields.*` key must be one this reads.
    let mut keys: Vec<&String> = options
        .keys()
        .filter(|k| k.starts_with(FIELDS_PREFIX))
        .collect();
    keys.sort();
    for key in keys {
        let value = &options[key];
        let with = || format!("'merge-engine'='aggregation' with {}", quoted(key, value));
        if key == DEFAULT_AGGREGATE_FUNCTION {
            continue;
        }
        let inner = &key[FIELDS_PREFIX.len()..];
        let field = if let Some(field) = inner.strip_suffix(AGGREGATE_FUNCTION_SUFFIX) {
            if primary_keys.iter().any(|k| k == field) {
                return Err(unsupported(
                    with(),
                    format!("'{field}' is a primary-key column, which is never aggregated"),
                ));
            }
            field
        } else if let Some(field) = inner.strip_suffix(LIST_AGG_DELIMITER_SUFFIX) {
            let function = options.get(&format!(
                "{FIELDS_PREFIX}{field}{AGGREGATE_FUNCTION_SUFFIX}"
            ));
            if function.map(String::as_str) != Some("listagg") {
                return Err(unsupported(
                    with(),
                    format!("column '{field}' does not use 'listagg'"),
                ));
            }
            field
        } else {
            return Err(unsupported(
                with(),
                "the union read reproduces only 'fields.<column>.aggregate-function', \
                 'fields.<column>.list-agg-delimiter' and 'fields.default-aggregate-function'",
            ));
        };
        if !fields.iter().any(|f| f.name() == field) {
            return Err(unsupported(
                with(),
                format!("the table has no column '{field}'"),
            ));
        }
    }
    let default = options.get(DEFAULT_AGGREGATE_FUNCTION);
    let mut aggregates = HashMap::new();
    for field in fields {
        let name = field.name();
        if primary_keys.iter().any(|k| k == name) {
            continue;
        }
        let key = format!("{FIELDS_PREFIX}{name}{AGGREGATE_FUNCTION_SUFFIX}");
        let (option_key, function) = match (options.get(&key), default) {
            (Some(function), _) => (key, function.as_str()),
            (None, Some(function)) => (DEFAULT_AGGREGATE_FUNCTION.to_string(), function.as_str()),
            (None, None) => (key, "last_non_null_value"),
        };
        let delimiter = options
            .get(&format!("{FIELDS_PREFIX}{name}{LIST_AGG_DELIMITER_SUFFIX}"))
            .cloned()
            .unwrap_or_else(|| ",".to_string());
        let aggregate = aggregate(function, field.data_type(), delimiter).map_err(|reason| {
            let option = format!(
                "'merge-engine'='aggregation' with {}",
                quoted(&option_key, function)
            );
            unsupported(option, format!("{reason} (column '{name}')"))
        })?;
        aggregates.insert(name.to_string(), aggregate);
    }
    Ok(aggregates)
}

fn aggregate(function: &str, data_type: &DataType, delimiter: String) -> Result<Aggregate, String> {
    let integer = matches!(
        data_type,
        DataType::TinyInt(_) | DataType::SmallInt(_) | DataType::Int(_) | DataType::BigInt(_)
    );
    let ordered = integer
        || matches!(
            data_type,
            DataType::Boolean(_)
                | DataType::Decimal(_)
                | DataType::Date(_)
                | DataType::Timestamp(_)
                | DataType::LocalZonedTimestamp(_)
                | DataType::Char(_)
                | DataType::VarChar(_)
        );
    let boolean = matches!(data_type, DataType::Boolean(_));
    let string = matches!(data_type, DataType::VarChar(v) if v.length() == VarCharType::MAX_LENGTH);
    let wrong_type = || {
        Err(format!(
            "the union read does not reproduce '{function}' on {data_type:?}"
        ))
    };
    match function {
        "sum" if integer => Ok(Aggregate::Sum),
        "sum" => Err(format!(
            "'sum' is reproduced on integer columns only: a floating-point sum depends on the \
             order Paimon adds rows in, and a decimal sum that overflows becomes NULL and \
             starts over, so both depend on how tiering groups rows; {data_type:?} is not an \
             integer type"
        )),
        "min" if ordered => Ok(Aggregate::Min),
        "max" if ordered => Ok(Aggregate::Max),
        "min" | "max" => wrong_type(),
        "last_value" => Ok(Aggregate::LastValue),
        "last_non_null_value" => Ok(Aggregate::LastNonNullValue),
        "first_value" => Ok(Aggregate::FirstValue),
        "first_non_null_value" | "first_not_null_value" => Ok(Aggregate::FirstNonNullValue),
        "bool_and" if boolean => Ok(Aggregate::BoolAnd),
        "bool_or" if boolean => Ok(Aggregate::BoolOr),
        "bool_and" | "bool_or" => wrong_type(),
        "listagg" if string => Ok(Aggregate::ListAgg { delimiter }),
        "listagg" => wrong_type(),
        _ => Err(format!(
            "the union read does not reproduce the aggregate function '{function}'; it \
             reproduces sum (integers), min, max, last_value, last_non_null_value, \
             first_value, first_non_null_value, bool_and, bool_or and listagg"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paimon::spec::{BigIntType, BooleanType, DoubleType, IntType};

    #[test]
    fn options_that_fix_merging_sequencing_or_bucketing_cannot_change() {
        for key in [
            "merge-engine",
            "ignore-delete",
            "first-row.ignore-delete",
            "partial-update.remove-record-on-delete",
            "aggregation.remove-record-on-delete",
            "fields.v.aggregate-function",
            "fields.default-aggregate-function",
            "fields.v.sequence-group",
            "sequence.field",
            "sequence.field.sort-order",
            "rowkind.field",
            "deletion-vectors.enabled",
            "bucket",
            "bucket-key",
            "dynamic-bucket.target-row-num",
            "primary-key",
            "partition",
        ] {
            assert!(change_refusal(key).is_some(), "{key}");
        }
        for key in [
            "snapshot.num-retained.min",
            "file.format",
            "changelog-producer",
            "lakestream.enabled",
            "comment",
            "buckets",
        ] {
            assert!(change_refusal(key).is_none(), "{key}");
        }
    }

    fn fields() -> Vec<DataField> {
        vec![
            DataField::new(0, "k".into(), DataType::Int(IntType::new())),
            DataField::new(1, "v".into(), DataType::BigInt(BigIntType::new())),
            DataField::new(2, "s".into(), DataType::VarChar(VarCharType::string_type())),
            DataField::new(3, "d".into(), DataType::Double(DoubleType::new())),
            DataField::new(4, "b".into(), DataType::Boolean(BooleanType::new())),
        ]
    }

    fn spec(pairs: &[(&str, &str)]) -> Result<MergeSpec, Unsupported> {
        let options = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        MergeSpec::of(&options, &fields(), &["k".to_string()])
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        let e = spec(pairs).expect_err("refused");
        format!("{} {}", e.option, e.reason)
    }

    #[test]
    fn supported_settings() {
        assert_eq!(spec(&[]).unwrap(), MergeSpec::plain());
        assert!(
            spec(&[("merge-engine", "Deduplicate"), ("ignore-delete", "TRUE")])
                .unwrap()
                .ignore_delete
        );
        let s = spec(&[
            ("sequence.field", "v, s"),
            ("sequence.field.sort-order", "descending"),
        ])
        .unwrap();
        assert_eq!(s.sequence_fields, ["v", "s"]);
        assert!(s.sequence_descending);
        let s = spec(&[
            ("merge-engine", "partial-update"),
            ("partial-update.ignore-delete", "true"),
        ])
        .unwrap();
        assert_eq!((s.engine, s.ignore_delete), (Engine::PartialUpdate, true));
        let s = spec(&[
            ("merge-engine", "aggregation"),
            ("fields.v.aggregate-function", "sum"),
            ("fields.default-aggregate-function", "last_value"),
            ("fields.s.aggregate-function", "listagg"),
            ("fields.s.list-agg-delimiter", "|"),
            ("fields.b.aggregate-function", "bool_or"),
        ])
        .unwrap();
        assert_eq!(s.aggregates["v"], Aggregate::Sum);
        assert_eq!(s.aggregates["d"], Aggregate::LastValue);
        assert_eq!(
            s.aggregates["s"],
            Aggregate::ListAgg {
                delimiter: "|".to_string()
            }
        );
        assert!(!s.aggregates.contains_key("k"));
        // Append tables are never merged.
        let options = HashMap::from([("merge-engine".to_string(), "first-row".to_string())]);
        assert_eq!(
            MergeSpec::of(&options, &fields(), &[]).unwrap(),
            MergeSpec::plain()
        );
    }

    /// Issue 37: a primary key without a partition column is refused with
    /// any bucket setting, naming the columns; keys that hold every
    /// partition column, and append tables, pass.
    #[test]
    fn a_key_without_its_partition_columns_is_refused() {
        let keys = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let options = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let refused = check_layout(&options(&[]), &keys(&["k"]), &keys(&["p"])).unwrap_err();
        assert_eq!(refused.option, "PRIMARY KEY (k) with PARTITIONED BY (p)");
        assert!(
            refused
                .reason
                .contains("leaves out the partition column(s) p")
                && refused.reason.contains("'bucket'='-1' (the default)")
                && refused.reason.contains("across partitions"),
            "{}",
            refused.reason
        );
        let refused = check_layout(
            &options(&[("bucket", "4")]),
            &keys(&["k", "a"]),
            &keys(&["a", "b"]),
        )
        .unwrap_err();
        assert!(
            refused.reason.contains("column(s) b;")
                && refused
                    .reason
                    .contains("'bucket'='4' Paimon keeps one row per key and partition"),
            "{}",
            refused.reason
        );
        let refused = check_layout(&options(&[("bucket", "-2")]), &keys(&["k"]), &[]).unwrap_err();
        assert_eq!(refused.option, "'bucket'='-2'");
        assert!(
            refused.reason.contains("postponed bucket"),
            "{}",
            refused.reason
        );
        for (pk, partition) in [
            (keys(&["k", "p"]), keys(&["p"])),
            (keys(&["k"]), keys(&[])),
            (keys(&[]), keys(&["p"])),
        ] {
            assert_eq!(check_layout(&options(&[]), &pk, &partition), Ok(()));
        }
    }

    #[test]
    fn refusals_name_the_option() {
        for (pairs, expected) in [
            (
                vec![("merge-engine", "first-row")],
                "'merge-engine'='first-row'",
            ),
            (vec![("merge-engine", "nope")], "'merge-engine'='nope'"),
            (
                vec![("deletion-vectors.enabled", "true")],
                "'deletion-vectors.enabled'='true'",
            ),
            (vec![("rowkind.field", "s")], "'rowkind.field'='s'"),
            (vec![("ignore-delete", "yes")], "'ignore-delete'='yes'"),
            (vec![("sequence.field", "x")], "no column 'x'"),
            (
                vec![("sequence.field.sort-order", "up")],
                "'sequence.field.sort-order'='up'",
            ),
            (
                vec![("sequence.auto-padding", "row-kind-flag")],
                "'sequence.auto-padding'",
            ),
            (
                vec![("merge-engine", "partial-update"), ("sequence.field", "v")],
                "'merge-engine'='partial-update' with 'sequence.field'='v'",
            ),
            (
                vec![
                    ("merge-engine", "partial-update"),
                    ("fields.v.sequence-group", "s"),
                ],
                "'merge-engine'='partial-update' with 'fields.v.sequence-group'='s'",
            ),
            (
                vec![
                    ("merge-engine", "partial-update"),
                    ("partial-update.remove-record-on-delete", "true"),
                ],
                "'partial-update.remove-record-on-delete'='true'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.v.aggregate-function", "xyz"),
                ],
                "'merge-engine'='aggregation' with 'fields.v.aggregate-function'='xyz'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.d.aggregate-function", "sum"),
                ],
                "'fields.d.aggregate-function'='sum'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.s.aggregate-function", "sum"),
                ],
                "'fields.s.aggregate-function'='sum'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.default-aggregate-function", "sum"),
                ],
                "'fields.default-aggregate-function'='sum'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.v.ignore-retract", "true"),
                ],
                "'fields.v.ignore-retract'='true'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.s.distinct", "true"),
                ],
                "'fields.s.distinct'='true'",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("fields.k.aggregate-function", "sum"),
                ],
                "primary-key column",
            ),
            (
                vec![
                    ("merge-engine", "aggregation"),
                    ("aggregation.remove-record-on-delete", "true"),
                ],
                "'aggregation.remove-record-on-delete'='true'",
            ),
            (
                vec![("merge-engine", "aggregation"), ("sequence.field", "v")],
                "'merge-engine'='aggregation' with 'sequence.field'='v'",
            ),
            (
                vec![("fields.v.default-value", "1")],
                "'fields.v.default-value'='1'",
            ),
        ] {
            let message = refused(&pairs);
            assert!(message.contains(expected), "{pairs:?}: {message}");
        }
    }

    #[test]
    fn what_makes_a_table_more_than_plain() {
        let beyond = |pairs: &[(&str, &str)]| {
            let options: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            MergeSpec::of(&options, &fields(), &["k".to_string()])
                .unwrap()
                .beyond_plain(&options)
        };
        assert_eq!(beyond(&[("merge-engine", "deduplicate")]), None);
        assert_eq!(
            beyond(&[("merge-engine", "partial-update")]).as_deref(),
            Some("'merge-engine'='partial-update'")
        );
        assert_eq!(
            beyond(&[("sequence.field", "v")]).as_deref(),
            Some("'sequence.field'='v'")
        );
        assert_eq!(
            beyond(&[("deduplicate.ignore-delete", "true")]).as_deref(),
            Some("'deduplicate.ignore-delete'='true'")
        );
    }

    #[test]
    fn deletes_and_updates() {
        assert!(spec(&[]).unwrap().delete_refusal().is_none());
        assert!(spec(&[]).unwrap().update_refusal().is_none());
        for pairs in [
            vec![("ignore-delete", "true")],
            vec![("merge-engine", "partial-update")],
            vec![("merge-engine", "aggregation")],
            vec![("sequence.field", "v")],
        ] {
            assert!(
                spec(&pairs).unwrap().delete_refusal().is_some(),
                "{pairs:?}"
            );
        }
        assert!(spec(&[("merge-engine", "aggregation")])
            .unwrap()
            .update_refusal()
            .is_some());
        assert!(spec(&[("merge-engine", "partial-update")])
            .unwrap()
            .update_refusal()
            .is_none());
    }
}
