//! A cheap first test of which Paimon rows of a primary-key union read have
//! a key the store's log touches.
//!
//! The exact test ([`super::key_map::KeyMap`]) needs every key in the row
//! format of the key columns: a conversion and a hash of bytes per row. Most
//! Paimon rows are not touched when few keys are in the store, so two
//! vectorised tests come first, and only the rows they cannot clear go on
//! to the exact test:
//!
//! - the range of the first key column: a Paimon batch whose first key
//!   column lies wholly outside the range of the log's is not touched at all
//!   (for types whose order agrees with key equality: integers, dates,
//!   times, timestamps, decimals and strings);
//! - the hashes of the log's keys, as DataFusion hashes columns
//!   ([`create_hashes`]): a row whose key hash is not among them is not
//!   touched. A row whose hash is among them is only a candidate.
//!
//! Both tests only clear rows, never drop one: a key they cannot clear goes
//! on to the exact test, so a touched key (an update or a delete) is always
//! found. They apply only where the Paimon batch's key columns have the
//! types the log's keys were hashed with; otherwise every row is a candidate.

use datafusion::arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray};
use datafusion::arrow::compute::min_string_view;
use datafusion::arrow::compute::{max, max_string, max_string_view, min, min_string};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Int16Type, Int32Type, Int64Type, Int8Type,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::error::Result as DFResult;
use hashbrown::HashTable;

/// Where the values of a key column lie, in an order that agrees with
/// equality: equal keys have equal bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bounds {
    /// No value yet (or only nulls).
    Empty,
    /// Integer-like values, widened.
    Ints(i128, i128),
    /// Strings, as bytes (a `str`'s order is its bytes' order).
    Bytes(Vec<u8>, Vec<u8>),
    /// A type without such an order, or a log key column with nulls: the
    /// range clears nothing.
    Unknown,
}

impl Bounds {
    /// The bounds of `array`'s non-null values; `Unknown` for a type whose
    /// order does not agree with equality (floats: `-0.0` and `0.0`, NaNs).
    fn of(array: &dyn Array) -> Bounds {
        fn ints<T>(array: &dyn Array) -> Bounds
        where
            T: ArrowPrimitiveType,
            T::Native: Into<i128>,
        {
            let array = array.as_primitive::<T>();
            match (min(array), max(array)) {
                (Some(lo), Some(hi)) => Bounds::Ints(lo.into(), hi.into()),
                _ => Bounds::Empty,
            }
        }
        fn bytes(lo: Option<&str>, hi: Option<&str>) -> Bounds {
            match (lo, hi) {
                (Some(lo), Some(hi)) => {
                    Bounds::Bytes(lo.as_bytes().to_vec(), hi.as_bytes().to_vec())
                }
                _ => Bounds::Empty,
            }
        }
        match array.data_type() {
            DataType::Int8 => ints::<Int8Type>(array),
            DataType::Int16 => ints::<Int16Type>(array),
            DataType::Int32 => ints::<Int32Type>(array),
            DataType::Int64 => ints::<Int64Type>(array),
            DataType::UInt8 => ints::<UInt8Type>(array),
            DataType::UInt16 => ints::<UInt16Type>(array),
            DataType::UInt32 => ints::<UInt32Type>(array),
            DataType::UInt64 => ints::<UInt64Type>(array),
            DataType::Date32 => ints::<Date32Type>(array),
            DataType::Date64 => ints::<Date64Type>(array),
            DataType::Time32(TimeUnit::Second) => ints::<Time32SecondType>(array),
            DataType::Time32(TimeUnit::Millisecond) => ints::<Time32MillisecondType>(array),
            DataType::Time64(TimeUnit::Microsecond) => ints::<Time64MicrosecondType>(array),
            DataType::Time64(TimeUnit::Nanosecond) => ints::<Time64NanosecondType>(array),
            DataType::Timestamp(TimeUnit::Second, _) => ints::<TimestampSecondType>(array),
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                ints::<TimestampMillisecondType>(array)
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                ints::<TimestampMicrosecondType>(array)
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ints::<TimestampNanosecondType>(array),
            DataType::Decimal128(_, _) => ints::<Decimal128Type>(array),
            DataType::Utf8 => {
                let array = array.as_string::<i32>();
                bytes(min_string(array), max_string(array))
            }
            DataType::LargeUtf8 => {
                let array = array.as_string::<i64>();
                bytes(min_string(array), max_string(array))
            }
            DataType::Utf8View => {
                let array = array.as_string_view();
                bytes(min_string_view(array), max_string_view(array))
            }
            _ => Bounds::Unknown,
        }
    }

    /// The bounds of both.
    fn union(self, other: Bounds) -> Bounds {
        match (self, other) {
            (Bounds::Unknown, _) | (_, Bounds::Unknown) => Bounds::Unknown,
            (Bounds::Empty, b) | (b, Bounds::Empty) => b,
            (Bounds::Ints(a, b), Bounds::Ints(c, d)) => Bounds::Ints(a.min(c), b.max(d)),
            (Bounds::Bytes(a, b), Bounds::Bytes(c, d)) => Bounds::Bytes(a.min(c), b.max(d)),
            // One column has one type: mixed kinds do not occur.
            _ => Bounds::Unknown,
        }
    }

    /// Whether no value within `self` can be within `other`.
    fn disjoint(&self, other: &Bounds) -> bool {
        match (self, other) {
            (Bounds::Empty, _) | (_, Bounds::Empty) => true,
            (Bounds::Ints(a, b), Bounds::Ints(c, d)) => b < c || d < a,
            (Bounds::Bytes(a, b), Bounds::Bytes(c, d)) => b < c || d < a,
            _ => false,
        }
    }
}

/// The keys a store's log touches, as a range and a set of hashes (see the
/// module's documentation). Built from the log's key columns with
/// [`TouchedKeys::add`], asked with [`TouchedKeys::candidates`].
#[derive(Debug)]
pub(crate) struct TouchedKeys {
    /// The key columns' types, as the log's keys were hashed.
    types: Vec<DataType>,
    state: RandomState,
    /// The hashes of the touched keys (each its own hash in the table).
    hashes: HashTable<u64>,
    /// The range of the first key column over the log's rows.
    bounds: Bounds,
    /// Scratch space for a batch's hashes.
    scratch: Vec<u64>,
}

/// Which rows of a Paimon batch may have a touched key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Candidates {
    /// None: the batch passes as it is.
    None,
    /// These rows, ascending; the others are not touched.
    Rows(Vec<u32>),
    /// The tests do not apply: every row goes to the exact test.
    All,
}

impl TouchedKeys {
    /// No key yet, for key columns of `types`.
    pub(crate) fn new(types: Vec<DataType>) -> Self {
        Self {
            types,
            state: RandomState::default(),
            hashes: HashTable::new(),
            bounds: Bounds::Empty,
            scratch: Vec::new(),
        }
    }

    fn types_match(&self, keys: &[ArrayRef]) -> bool {
        keys.len() == self.types.len()
            && !keys.is_empty()
            && keys
                .iter()
                .zip(&self.types)
                .all(|(k, t)| k.data_type() == t)
    }

    /// Adds the keys of the rows of a log batch (its key columns) for which
    /// `touches` holds. Rows it leaves out only widen the range.
    pub(crate) fn add(
        &mut self,
        keys: &[ArrayRef],
        touches: impl Fn(usize) -> bool,
    ) -> DFResult<()> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        if !self.types_match(keys) {
            // Keys this filter cannot hash the same way: nothing clears.
            self.bounds = Bounds::Unknown;
            self.types.clear();
            return Ok(());
        }
        let bounds = if first.null_count() > 0 {
            Bounds::Unknown
        } else {
            Bounds::of(first.as_ref())
        };
        self.bounds = std::mem::replace(&mut self.bounds, Bounds::Empty).union(bounds);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(first.len(), 0);
        create_hashes(keys, &self.state, &mut scratch)?;
        for (row, &hash) in scratch.iter().enumerate() {
            if touches(row) && self.hashes.find(hash, |&h| h == hash).is_none() {
                self.hashes.insert_unique(hash, hash, |&h| h);
            }
        }
        self.scratch = scratch;
        Ok(())
    }

    /// The rows of a Paimon batch (its key columns) that may have a touched
    /// key.
    pub(crate) fn candidates(&self, keys: &[ArrayRef]) -> DFResult<Candidates> {
        let Some(first) = keys.first() else {
            return Ok(Candidates::All);
        };
        if self.hashes.is_empty() && self.types_match(keys) {
            return Ok(Candidates::None);
        }
        if !self.types_match(keys) {
            return Ok(Candidates::All);
        }
        if !matches!(self.bounds, Bounds::Unknown)
            && Bounds::of(first.as_ref()).disjoint(&self.bounds)
        {
            return Ok(Candidates::None);
        }
        let mut hashes = vec![0; first.len()];
        create_hashes(keys, &self.state, &mut hashes)?;
        let mut rows = Vec::new();
        for (row, &hash) in hashes.iter().enumerate() {
            if self.hashes.find(hash, |&h| h == hash).is_some() {
                rows.push(u32::try_from(row).map_err(|_| {
                    datafusion::error::DataFusionError::Internal(format!(
                        "row {row} of a batch is past u32::MAX"
                    ))
                })?);
            }
        }
        Ok(if rows.is_empty() {
            Candidates::None
        } else {
            Candidates::Rows(rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Float64Array, Int32Array, Int64Array, StringArray, StringViewArray,
    };

    use super::*;

    fn int32(values: &[Option<i32>]) -> ArrayRef {
        Arc::new(Int32Array::from(values.to_vec()))
    }

    fn strings(values: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn touched(keys: &[ArrayRef]) -> TouchedKeys {
        let mut touched = TouchedKeys::new(keys.iter().map(|k| k.data_type().clone()).collect());
        touched.add(keys, |_| true).unwrap();
        touched
    }

    #[test]
    fn no_key_touched_passes_every_row() {
        let touched = TouchedKeys::new(vec![DataType::Int32]);
        let batch = int32(&[Some(1), Some(2)]);
        assert_eq!(touched.candidates(&[batch]).unwrap(), Candidates::None);
    }

    #[test]
    fn a_batch_outside_the_range_passes() {
        let touched = touched(&[int32(&[Some(100), Some(200)])]);
        let below = int32(&[Some(1), Some(99)]);
        let above = int32(&[Some(201), Some(5000)]);
        assert_eq!(touched.candidates(&[below]).unwrap(), Candidates::None);
        assert_eq!(touched.candidates(&[above]).unwrap(), Candidates::None);
        // Inside the range, only the touched keys are candidates.
        let inside = int32(&[Some(99), Some(100), Some(150), Some(200)]);
        assert_eq!(
            touched.candidates(&[inside]).unwrap(),
            Candidates::Rows(vec![1, 3])
        );
        // Batches that share only an end of the range.
        let low_end = int32(&[Some(50), Some(100)]);
        let high_end = int32(&[Some(200), Some(300)]);
        assert_eq!(
            touched.candidates(&[low_end]).unwrap(),
            Candidates::Rows(vec![1])
        );
        assert_eq!(
            touched.candidates(&[high_end]).unwrap(),
            Candidates::Rows(vec![0])
        );
    }

    #[test]
    fn every_touched_key_is_a_candidate() {
        let log: Vec<i64> = (0..10_000).map(|i| i * 7 - 20_000).collect();
        let keys: ArrayRef = Arc::new(Int64Array::from(log.clone()));
        let touched = touched(&[keys]);
        let paimon: Vec<i64> = (-30_000..60_000).collect();
        let Candidates::Rows(rows) = touched
            .candidates(&[Arc::new(Int64Array::from(paimon.clone())) as ArrayRef])
            .unwrap()
        else {
            panic!("expected rows");
        };
        let found: Vec<i64> = rows.iter().map(|&r| paimon[r as usize]).collect();
        // Every touched key is found; a few hash collisions may join them.
        for key in &log {
            assert!(found.binary_search(key).is_ok(), "{key} not a candidate");
        }
        assert!(found.len() < log.len() + 10, "{} candidates", found.len());
    }

    #[test]
    fn multi_column_and_string_keys() {
        let a = strings(&["x", "y", "zz"]);
        let b = int32(&[Some(1), Some(2), Some(3)]);
        let touched = touched(&[a, b]);
        let a = strings(&["x", "y", "zz", "a", "zzz"]);
        let b = int32(&[Some(1), Some(3), Some(3), Some(1), Some(3)]);
        assert_eq!(
            touched.candidates(&[a, b]).unwrap(),
            Candidates::Rows(vec![0, 2])
        );
        // Outside the first column's range.
        let a = strings(&["zzz", "zzzz"]);
        let b = int32(&[Some(1), Some(3)]);
        assert_eq!(touched.candidates(&[a, b]).unwrap(), Candidates::None);
    }

    #[test]
    fn string_views_have_a_range() {
        let log: ArrayRef = Arc::new(StringViewArray::from(vec!["m", "p"]));
        let touched = touched(&[log]);
        let paimon: ArrayRef = Arc::new(StringViewArray::from(vec!["a", "l"]));
        assert_eq!(touched.candidates(&[paimon]).unwrap(), Candidates::None);
        let paimon: ArrayRef = Arc::new(StringViewArray::from(vec!["a", "p"]));
        assert_eq!(
            touched.candidates(&[paimon]).unwrap(),
            Candidates::Rows(vec![1])
        );
    }

    #[test]
    fn other_types_send_every_row_to_the_exact_test() {
        // The batch's type is not the log's.
        let touched = touched(&[int32(&[Some(1)])]);
        let other: ArrayRef = Arc::new(Int64Array::from(vec![1i64, 2]));
        assert_eq!(touched.candidates(&[other]).unwrap(), Candidates::All);
        // Floats have no range (0.0 and -0.0 differ as keys), but hashes.
        let log: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.0]));
        let touched_f = {
            let mut t = TouchedKeys::new(vec![DataType::Float64]);
            t.add(&[log], |_| true).unwrap();
            t
        };
        assert_eq!(touched_f.bounds, Bounds::Unknown);
        let paimon: ArrayRef = Arc::new(Float64Array::from(vec![5.0, 2.0]));
        assert_eq!(
            touched_f.candidates(&[paimon]).unwrap(),
            Candidates::Rows(vec![1])
        );
    }

    #[test]
    fn a_log_key_with_nulls_has_no_range() {
        let touched = touched(&[int32(&[Some(5), None])]);
        assert_eq!(touched.bounds, Bounds::Unknown);
        let paimon = int32(&[None, Some(1), Some(5)]);
        let Candidates::Rows(rows) = touched.candidates(&[paimon]).unwrap() else {
            panic!("expected rows");
        };
        assert!(rows.contains(&2));
    }

    #[test]
    fn rows_left_out_are_not_candidates() {
        let mut touched = TouchedKeys::new(vec![DataType::Int32]);
        touched
            .add(&[int32(&[Some(1), Some(2), Some(3)])], |row| row != 1)
            .unwrap();
        let paimon = int32(&[Some(1), Some(2), Some(3)]);
        assert_eq!(
            touched.candidates(&[paimon]).unwrap(),
            Candidates::Rows(vec![0, 2])
        );
    }
}
