//! How a Paimon table and its Fluss table line up.
//!
//! Fluss 0.9 tiers a lake table into a Paimon table shaped the way its own
//! lake catalog would have created it (`PaimonConversions.toPaimonSchema` in
//! `fluss-lake-paimon`): the user's columns, then the system columns
//! `__bucket INT`, `__offset BIGINT`, `__timestamp TIMESTAMP_LTZ(3)`, and a set
//! of options (`bucket`, `bucket-key`, `changelog-producer`, the Fluss table
//! properties as `fluss.<key>`). Enabling the lake on an existing Fluss table
//! accepts an existing Paimon table of exactly that shape, with or without data.
//! This module computes the Fluss table for a Paimon table, the shape the
//! Paimon table must have, and the mismatches between the two.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use fluss::metadata as fm;
use paimon::spec::{
    BigIntType, CoreOptions, DataField, DataType as PaimonType, IntType, LocalZonedTimestampType,
    SchemaChange, VarBinaryType, VarCharType,
};
use paimon::table::Table;

use super::FlussStoreError;

/// The columns Fluss's tiering adds after the user's, in this order.
pub const SYSTEM_COLUMNS: [&str; 3] = ["__bucket", "__offset", "__timestamp"];

/// Fluss's Paimon commit user: snapshots committed by its tiering service.
pub(crate) const TIERING_COMMIT_USER: &str = "__fluss_lake_tiering";

/// The Fluss table property that turns tiering on.
pub(crate) const DATALAKE_ENABLED: &str = "table.datalake.enabled";

fn system_column_type(name: &str) -> Option<PaimonType> {
    match name {
        "__bucket" => Some(PaimonType::Int(IntType::new())),
        "__offset" => Some(PaimonType::BigInt(BigIntType::new())),
        "__timestamp" => LocalZonedTimestampType::new(3)
            .ok()
            .map(PaimonType::LocalZonedTimestamp),
        _ => None,
    }
}

/// The Paimon table's own columns: its fields without the trailing system columns.
pub(crate) fn user_fields(table: &Table) -> &[DataField] {
    crate::store::own_fields(table.schema().fields(), &SYSTEM_COLUMNS)
}

/// What the Fluss table of a Paimon table looks like.
#[derive(Debug, Clone)]
pub(crate) struct FlussShape {
    pub(crate) columns: Vec<(String, fm::DataType, Option<String>)>,
    pub(crate) primary_key: Vec<String>,
    pub(crate) bucket_keys: Vec<String>,
    /// `None`: any count (a bucket-unaware Paimon append table).
    pub(crate) bucket_count: Option<i32>,
    pub(crate) comment: String,
}

impl FlussShape {
    /// The Fluss table for `table`, or why there is none.
    pub(crate) fn of(table: &Table) -> Result<Self, FlussStoreError> {
        let name = table.identifier().full_name();
        let schema = table.schema();
        if !schema.partition_keys().is_empty() {
            return Err(FlussStoreError::Unsupported {
                table: name,
                reason: "it is partitioned; the fluss store serves unpartitioned tables only"
                    .to_string(),
            });
        }
        let primary_key = schema.primary_keys().to_vec();
        let mut columns = Vec::new();
        for field in user_fields(table) {
            if field.name().starts_with("__") {
                return Err(FlussStoreError::Unsupported {
                    table: name,
                    reason: format!(
                        "column '{}' starts with '__', which Fluss reserves for its system columns",
                        field.name()
                    ),
                });
            }
            let data_type =
                fluss_type(field.data_type()).map_err(|reason| FlussStoreError::Unsupported {
                    table: name.clone(),
                    reason: format!("column '{}' {reason}", field.name()),
                })?;
            if primary_key.iter().any(|k| k == field.name()) && data_type.is_nullable() {
                return Err(FlussStoreError::Unsupported {
                    table: name,
                    reason: format!(
                        "primary-key column '{}' is nullable; declare it NOT NULL",
                        field.name()
                    ),
                });
            }
            columns.push((
                field.name().to_string(),
                data_type,
                field.description().map(str::to_string),
            ));
        }
        let options = CoreOptions::new(schema.options());
        let bucket = options.bucket();
        let (bucket_keys, bucket_count) = if primary_key.is_empty() {
            if bucket > 0 {
                let keys = schema.bucket_keys();
                if keys.is_empty() {
                    return Err(FlussStoreError::Unsupported {
                        table: name,
                        reason: format!("it has 'bucket' = '{bucket}' but no 'bucket-key'"),
                    });
                }
                (keys, Some(bucket))
            } else if bucket == -1 {
                (Vec::new(), None)
            } else {
                return Err(FlussStoreError::Unsupported {
                    table: name,
                    reason: format!("its 'bucket' = '{bucket}' is not -1 or a fixed bucket count"),
                });
            }
        } else if bucket > 0 {
            (schema.bucket_keys(), Some(bucket))
        } else {
            return Err(FlussStoreError::Unsupported {
                table: name,
                reason: format!(
                    "it is a primary-key table with 'bucket' = '{bucket}'; Fluss bucket N is \
                     Paimon bucket N, so set a fixed bucket count, e.g. WITH ('bucket' = '4')"
                ),
            });
        };
        Ok(Self {
            columns,
            primary_key,
            bucket_keys,
            bucket_count,
            comment: schema.comment().unwrap_or_default().to_string(),
        })
    }

    /// The Fluss schema.
    pub(crate) fn fluss_schema(&self) -> fluss::error::Result<fm::Schema> {
        let columns = self
            .columns
            .iter()
            .map(|(name, data_type, comment)| {
                let column = fm::Column::new(name.as_str(), data_type.clone());
                match comment {
                    Some(comment) => column.with_comment(comment.as_str()),
                    None => column,
                }
            })
            .collect();
        let builder = fm::Schema::builder().with_columns(columns);
        let builder = if self.primary_key.is_empty() {
            builder
        } else {
            builder.primary_key(self.primary_key.clone())?
        };
        builder.build()
    }

    /// How an existing Fluss table differs from this shape, if it does.
    pub(crate) fn mismatch(&self, info: &fm::TableInfo) -> Option<String> {
        let fluss: Vec<(&str, &fm::DataType)> = info
            .get_row_type()
            .fields()
            .iter()
            .map(|f| (f.name(), f.data_type()))
            .collect();
        let ours: Vec<(&str, &fm::DataType)> = self
            .columns
            .iter()
            .map(|(n, t, _)| (n.as_str(), t))
            .collect();
        if fluss != ours {
            return Some(format!(
                "its columns are ({}), the Paimon table's are ({})",
                describe_columns(&fluss),
                describe_columns(&ours)
            ));
        }
        if info.get_primary_keys() != &self.primary_key {
            return Some(format!(
                "its primary key is ({}), the Paimon table's is ({})",
                info.get_primary_keys().join(", "),
                self.primary_key.join(", ")
            ));
        }
        if info.is_partitioned() {
            return Some("it is partitioned, the Paimon table is not".to_string());
        }
        if info.get_bucket_keys() != self.bucket_keys.as_slice() {
            return Some(format!(
                "its bucket keys are ({}), the Paimon table's are ({})",
                info.get_bucket_keys().join(", "),
                self.bucket_keys.join(", ")
            ));
        }
        if let Some(count) = self.bucket_count {
            if info.get_num_buckets() != count {
                return Some(format!(
                    "it has {} buckets, the Paimon table has 'bucket' = '{count}'",
                    info.get_num_buckets()
                ));
            }
        }
        None
    }
}

fn describe_columns(columns: &[(&str, &fm::DataType)]) -> String {
    columns
        .iter()
        .map(|(name, data_type)| format!("{name} {data_type}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Fluss type holding a Paimon type exactly, so that Fluss's own mapping
/// back to Paimon gives the same type; or why there is none.
pub(crate) fn fluss_type(paimon: &PaimonType) -> Result<fm::DataType, String> {
    let nullable = paimon.is_nullable();
    let invalid = |e: fluss::error::Error| format!("has a type Fluss rejects: {e}");
    Ok(match paimon {
        PaimonType::Boolean(_) => fm::DataType::Boolean(fm::BooleanType::with_nullable(nullable)),
        PaimonType::TinyInt(_) => fm::DataType::TinyInt(fm::TinyIntType::with_nullable(nullable)),
        PaimonType::SmallInt(_) => {
            fm::DataType::SmallInt(fm::SmallIntType::with_nullable(nullable))
        }
        PaimonType::Int(_) => fm::DataType::Int(fm::IntType::with_nullable(nullable)),
        PaimonType::BigInt(_) => fm::DataType::BigInt(fm::BigIntType::with_nullable(nullable)),
        PaimonType::Float(_) => fm::DataType::Float(fm::FloatType::with_nullable(nullable)),
        PaimonType::Double(_) => fm::DataType::Double(fm::DoubleType::with_nullable(nullable)),
        PaimonType::Decimal(d) => fm::DataType::Decimal(
            fm::DecimalType::with_nullable(nullable, d.precision(), d.scale()).map_err(invalid)?,
        ),
        PaimonType::Date(_) => fm::DataType::Date(fm::DateType::with_nullable(nullable)),
        PaimonType::Time(t) if t.precision() <= 3 => fm::DataType::Time(
            fm::TimeType::with_nullable(nullable, t.precision()).map_err(invalid)?,
        ),
        PaimonType::Timestamp(t) => fm::DataType::Timestamp(
            fm::TimestampType::with_nullable(nullable, t.precision()).map_err(invalid)?,
        ),
        PaimonType::LocalZonedTimestamp(t) => fm::DataType::TimestampLTz(
            fm::TimestampLTzType::with_nullable(nullable, t.precision()).map_err(invalid)?,
        ),
        PaimonType::Char(c) => {
            let length = u32::try_from(c.length()).map_err(|_| "has too long a CHAR".to_string())?;
            fm::DataType::Char(fm::CharType::with_nullable(length, nullable))
        }
        PaimonType::VarChar(v) if v.length() == VarCharType::MAX_LENGTH => {
            fm::DataType::String(fm::StringType::with_nullable(nullable))
        }
        PaimonType::VarChar(v) => {
            return Err(format!(
                "is VARCHAR({}): Fluss has STRING and CHAR(n) only; declare it STRING",
                v.length()
            ))
        }
        PaimonType::Binary(b) => {
            fm::DataType::Binary(fm::BinaryType::with_nullable(nullable, b.length()))
        }
        PaimonType::VarBinary(v) if v.length() == VarBinaryType::MAX_LENGTH => {
            fm::DataType::Bytes(fm::BytesType::with_nullable(nullable))
        }
        other => {
            return Err(format!(
                "has type {other:?}, which the fluss store does not support yet (supported: \
                 BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL, DATE, TIME(0..3), \
                 TIMESTAMP, TIMESTAMP_LTZ, CHAR(n), STRING, BINARY(n), BYTES)"
            ))
        }
    })
}

/// The Arrow type fluss-rs reads and writes a Fluss type as (its
/// `record::to_arrow_type`), spelled in arrow 58 for the bridge.
pub(crate) fn fluss_arrow_type(fluss: &fm::DataType) -> Result<ArrowType, String> {
    let unit = |precision: u32| match precision {
        0 => TimeUnit::Second,
        1..=3 => TimeUnit::Millisecond,
        4..=6 => TimeUnit::Microsecond,
        _ => TimeUnit::Nanosecond,
    };
    Ok(match fluss {
        fm::DataType::Boolean(_) => ArrowType::Boolean,
        fm::DataType::TinyInt(_) => ArrowType::Int8,
        fm::DataType::SmallInt(_) => ArrowType::Int16,
        fm::DataType::Int(_) => ArrowType::Int32,
        fm::DataType::BigInt(_) => ArrowType::Int64,
        fm::DataType::Float(_) => ArrowType::Float32,
        fm::DataType::Double(_) => ArrowType::Float64,
        fm::DataType::Char(_) | fm::DataType::String(_) => ArrowType::Utf8,
        fm::DataType::Decimal(d) => ArrowType::Decimal128(
            u8::try_from(d.precision()).map_err(|e| e.to_string())?,
            i8::try_from(d.scale()).map_err(|e| e.to_string())?,
        ),
        fm::DataType::Date(_) => ArrowType::Date32,
        fm::DataType::Time(t) => match t.precision() {
            0 => ArrowType::Time32(TimeUnit::Second),
            1..=3 => ArrowType::Time32(TimeUnit::Millisecond),
            p => ArrowType::Time64(unit(p)),
        },
        fm::DataType::Timestamp(t) => ArrowType::Timestamp(unit(t.precision()), None),
        fm::DataType::TimestampLTz(t) => {
            ArrowType::Timestamp(unit(t.precision()), Some("UTC".into()))
        }
        fm::DataType::Bytes(_) => ArrowType::Binary,
        fm::DataType::Binary(b) => {
            ArrowType::FixedSizeBinary(i32::try_from(b.length()).map_err(|e| e.to_string())?)
        }
        other => return Err(format!("the fluss store does not support type {other}")),
    })
}

/// The Arrow schema fluss-rs uses for a table's rows, in arrow 58.
pub(crate) fn fluss_arrow_schema(shape: &FlussShape) -> Result<SchemaRef, String> {
    let fields = shape
        .columns
        .iter()
        .map(|(name, data_type, _)| {
            Ok(Field::new(
                name,
                fluss_arrow_type(data_type)?,
                data_type.is_nullable(),
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// The options Fluss's lake catalog gives the Paimon table of `info`
/// (`toPaimonSchema`), with `table.datalake.enabled` as `datalake_enabled`.
pub(crate) fn expected_paimon_options(
    info: &fm::TableInfo,
    datalake_enabled: bool,
) -> BTreeMap<String, String> {
    let mut options = BTreeMap::new();
    options.insert("partition.legacy-name".to_string(), "false".to_string());
    let bucket_keys = info.get_bucket_keys();
    if bucket_keys.is_empty() {
        options.insert("bucket".to_string(), "-1".to_string());
    } else {
        options.insert("bucket".to_string(), info.get_num_buckets().to_string());
        options.insert("bucket-key".to_string(), bucket_keys.join(","));
    }
    if info.has_primary_key() {
        options.insert("changelog-producer".to_string(), "input".to_string());
    }
    let properties = info
        .get_properties()
        .iter()
        .chain(info.get_custom_properties().iter());
    for (key, value) in properties {
        if let Some(paimon_key) = key.strip_prefix("paimon.") {
            options.insert(paimon_key.to_string(), value.clone());
        } else if !key.starts_with("table.datalake.paimon.") {
            options.insert(format!("fluss.{key}"), value.clone());
        }
    }
    options.insert(
        format!("fluss.{DATALAKE_ENABLED}"),
        datalake_enabled.to_string(),
    );
    options
}

/// The schema changes that give the Paimon table the shape Fluss tiers into:
/// the system columns, `options`, and a comment Fluss's check reads back
/// as what the Fluss table holds. Errors when a column is in the way.
pub(crate) fn paimon_changes(
    table: &Table,
    options: &BTreeMap<String, String>,
) -> Result<Vec<SchemaChange>, FlussStoreError> {
    let name = table.identifier().full_name();
    let schema = table.schema();
    let fields = schema.fields();
    let user = user_fields(table).len();
    let mut changes = Vec::new();
    let present = &fields[user..];
    for (i, column) in SYSTEM_COLUMNS.iter().enumerate() {
        let expected = system_column_type(column).ok_or_else(|| FlussStoreError::Unsupported {
            table: name.clone(),
            reason: format!("no type for system column {column}"),
        })?;
        match present.get(i) {
            Some(field) if field.name() == *column => {
                if field.data_type() != &expected {
                    return Err(FlussStoreError::Unsupported {
                        table: name,
                        reason: format!(
                            "its system column '{column}' has type {:?}, Fluss tiers {:?}",
                            field.data_type(),
                            expected
                        ),
                    });
                }
            }
            Some(field) => {
                return Err(FlussStoreError::Unsupported {
                    table: name,
                    reason: format!(
                        "column '{}' stands where Fluss's system column '{column}' must be",
                        field.name()
                    ),
                })
            }
            None => changes.push(SchemaChange::AddColumn {
                field_names: vec![column.to_string()],
                data_type: expected,
                comment: None,
                column_move: None,
            }),
        }
    }
    for (key, value) in options {
        match schema.options().get(key) {
            Some(current) if current == value => {}
            // Fluss's own properties (`fluss.*`) follow the Fluss table.
            Some(current) if !key.starts_with("fluss.") => {
                return Err(FlussStoreError::Unsupported {
                    table: name,
                    reason: format!(
                        "its option '{key}' is '{current}', and Fluss tiers only into tables with                          '{key}' = '{value}'"
                    ),
                })
            }
            _ => changes.push(SchemaChange::set_option(key.clone(), value.clone())),
        }
    }
    // paimon-rust writes an absent comment as `"comment": null`, which Java
    // Paimon reads back as the string "null", so Fluss's schema check fails.
    // An empty comment reads back the same on both sides.
    if schema.comment().is_none() {
        changes.push(SchemaChange::UpdateComment {
            comment: Some(String::new()),
        });
    }
    Ok(changes)
}
