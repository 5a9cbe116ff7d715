//! What a store's change log yields: [`ChangeBatch`]es, rows with what each
//! row does.

use datafusion::arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use futures::stream::BoxStream;

use crate::error::Result;

/// What a row of a store's change log does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum RowKind {
    /// A new row (append tables) or the newest version of a key (primary-key tables).
    Upsert = 0,
    /// The key is gone (primary-key tables).
    Delete = 3,
}

impl RowKind {
    /// The kind's code: Paimon's row kind byte (`+I` 0, `-D` 3), as a store
    /// may keep it in an `Int8` column (see [`ChangeBatch::from_kind_column`]).
    pub fn as_i8(self) -> i8 {
        self as i8
    }

    /// The kind of a code [`Self::as_i8`] gives; `None` for any other value.
    pub fn from_i8(value: i8) -> Option<Self> {
        match value {
            0 => Some(RowKind::Upsert),
            3 => Some(RowKind::Delete),
            _ => None,
        }
    }
}

/// Rows of a store's change log, in write order, each with the [`RowKind`]
/// that says what it does. The rows have the table's columns in
/// [`super::table_arrow_schema`] form (a store that keeps rows written under
/// an earlier schema of the table lines them up with the current one first).
///
/// A change batch always has exactly one row kind per row: the constructors
/// refuse anything else.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    rows: RecordBatch,
    kinds: Vec<RowKind>,
}

/// Why rows and row kinds do not make a [`ChangeBatch`]. Stores convert it
/// into their own errors, naming the store and the table (it is a store's
/// bug, or data the store wrote that does not read back).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeBatchError {
    /// Not one row kind per row.
    #[error("a change batch of {rows} rows has {kinds} row kinds; it needs one per row")]
    LengthMismatch {
        /// The rows.
        rows: usize,
        /// The row kinds.
        kinds: usize,
    },
    /// A column of row kind codes that is not `Int8`.
    #[error("row kinds are Int8 codes, not {data_type}")]
    KindType {
        /// The column's type.
        data_type: DataType,
    },
    /// A row without a row kind.
    #[error("row {row} of a change batch has no row kind (null)")]
    NullKind {
        /// The row's index in the batch.
        row: usize,
    },
    /// A code that is no [`RowKind`].
    #[error(
        "row {row} of a change batch has row kind code {code}, which is none of 0 (upsert) \
         and 3 (delete)"
    )]
    UnknownKind {
        /// The row's index in the batch.
        row: usize,
        /// The code.
        code: i8,
    },
}

impl ChangeBatch {
    /// `rows` with `kinds`, one per row.
    pub fn try_new(
        rows: RecordBatch,
        kinds: Vec<RowKind>,
    ) -> std::result::Result<Self, ChangeBatchError> {
        if kinds.len() != rows.num_rows() {
            return Err(ChangeBatchError::LengthMismatch {
                rows: rows.num_rows(),
                kinds: kinds.len(),
            });
        }
        Ok(Self { rows, kinds })
    }

    /// `rows` with the row kinds a column of codes ([`RowKind::as_i8`])
    /// holds, one per row, for a store that keeps them that way. Every code
    /// is checked.
    pub fn from_kind_column(
        rows: RecordBatch,
        kinds: &dyn Array,
    ) -> std::result::Result<Self, ChangeBatchError> {
        let codes = kinds.as_any().downcast_ref::<Int8Array>().ok_or_else(|| {
            ChangeBatchError::KindType {
                data_type: kinds.data_type().clone(),
            }
        })?;
        let kinds = codes
            .iter()
            .enumerate()
            .map(|(row, code)| {
                let code = code.ok_or(ChangeBatchError::NullKind { row })?;
                RowKind::from_i8(code).ok_or(ChangeBatchError::UnknownKind { row, code })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Self::try_new(rows, kinds)
    }

    /// `rows`, every one of them `kind`.
    pub fn of_kind(rows: RecordBatch, kind: RowKind) -> Self {
        let kinds = vec![kind; rows.num_rows()];
        Self { rows, kinds }
    }

    /// `rows`, every one of them an upsert: new rows of an append table, or
    /// the newest versions of their keys.
    pub fn upserts(rows: RecordBatch) -> Self {
        Self::of_kind(rows, RowKind::Upsert)
    }

    /// The rows.
    pub fn rows(&self) -> &RecordBatch {
        &self.rows
    }

    /// The row kinds, one per row.
    pub fn kinds(&self) -> &[RowKind] {
        &self.kinds
    }

    /// The kind of row `row`; `None` past the last row.
    pub fn kind(&self, row: usize) -> Option<RowKind> {
        self.kinds.get(row).copied()
    }

    /// How many rows the batch has.
    pub fn num_rows(&self) -> usize {
        self.rows.num_rows()
    }

    /// Whether every row is an upsert (no deletes).
    pub fn is_all_upserts(&self) -> bool {
        self.kinds.iter().all(|kind| *kind == RowKind::Upsert)
    }

    /// The rows and their kinds (as many as rows).
    pub fn into_parts(self) -> (RecordBatch, Vec<RowKind>) {
        (self.rows, self.kinds)
    }
}

/// A store's change log as [`super::StoreLog`] yields it: change batches in
/// write order, or the store's errors.
pub type ChangeStream = BoxStream<'static, Result<ChangeBatch>>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn rows(n: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from_iter_values(0..n))])
            .expect("a batch of ids")
    }

    #[test]
    fn one_kind_per_row_is_a_change_batch() {
        let change =
            ChangeBatch::try_new(rows(2), vec![RowKind::Upsert, RowKind::Delete]).expect("valid");
        assert_eq!(change.num_rows(), 2);
        assert_eq!(change.kinds(), [RowKind::Upsert, RowKind::Delete]);
        assert_eq!(change.kind(1), Some(RowKind::Delete));
        assert_eq!(change.kind(2), None);
        assert!(!change.is_all_upserts());
        let (batch, kinds) = change.into_parts();
        assert_eq!(batch.num_rows(), kinds.len());
    }

    #[test]
    fn kinds_of_another_length_are_refused() {
        let err = ChangeBatch::try_new(rows(3), vec![RowKind::Upsert]).unwrap_err();
        assert_eq!(err, ChangeBatchError::LengthMismatch { rows: 3, kinds: 1 });
        assert_eq!(
            err.to_string(),
            "a change batch of 3 rows has 1 row kinds; it needs one per row"
        );
        let codes = Int8Array::from(vec![0, 3, 0, 0]);
        let err = ChangeBatch::from_kind_column(rows(3), &codes).unwrap_err();
        assert_eq!(err, ChangeBatchError::LengthMismatch { rows: 3, kinds: 4 });
    }

    #[test]
    fn a_column_of_codes_gives_its_kinds() {
        let codes = Int8Array::from(vec![0, 3, 0]);
        let change = ChangeBatch::from_kind_column(rows(3), &codes).expect("valid codes");
        assert_eq!(
            change.kinds(),
            [RowKind::Upsert, RowKind::Delete, RowKind::Upsert]
        );
        for kind in [RowKind::Upsert, RowKind::Delete] {
            assert_eq!(RowKind::from_i8(kind.as_i8()), Some(kind));
        }
    }

    #[test]
    fn codes_that_are_no_row_kind_are_refused() {
        // 1 and 2 are Paimon's update-before and update-after: a change log
        // has neither.
        for code in [1, 2, -1, 4] {
            let codes = Int8Array::from(vec![0, code]);
            let err = ChangeBatch::from_kind_column(rows(2), &codes).unwrap_err();
            assert_eq!(err, ChangeBatchError::UnknownKind { row: 1, code });
            assert!(err.to_string().contains(&format!("row kind code {code}")));
        }
        let codes = Int8Array::from(vec![Some(0), None]);
        let err = ChangeBatch::from_kind_column(rows(2), &codes).unwrap_err();
        assert_eq!(err, ChangeBatchError::NullKind { row: 1 });
        let wide = Int64Array::from(vec![0, 3]);
        let err = ChangeBatch::from_kind_column(rows(2), &wide).unwrap_err();
        assert_eq!(
            err,
            ChangeBatchError::KindType {
                data_type: DataType::Int64
            }
        );
    }

    #[test]
    fn upserts_are_all_upserts() {
        let change = ChangeBatch::upserts(rows(4));
        assert_eq!(change.num_rows(), 4);
        assert_eq!(change.kinds(), [RowKind::Upsert; 4]);
        assert!(change.is_all_upserts());
        let empty = ChangeBatch::upserts(rows(0));
        assert!(empty.kinds().is_empty() && empty.is_all_upserts());
        let deletes = ChangeBatch::of_kind(rows(2), RowKind::Delete);
        assert_eq!(deletes.kinds(), [RowKind::Delete; 2]);
        assert!(!deletes.is_all_upserts());
    }
}
