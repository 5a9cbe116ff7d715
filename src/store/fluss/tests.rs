//! Unit tests of the arrow bridge and the type mapping.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, RecordBatch,
    StringArray, Time32MillisecondArray, Time32SecondArray, TimestampMicrosecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use paimon::spec::{
    BigIntType, BinaryType, BooleanType, CharType, DataType as P, DateType, DecimalType,
    DoubleType, FloatType, IntType, LocalZonedTimestampType, SmallIntType, TimeType, TimestampType,
    TinyIntType, VarBinaryType, VarCharType,
};

use super::arrow_bridge::{from_arrow59, to_arrow59};
use super::schema::{fluss_arrow_type, fluss_type};

fn ok<T>(result: Result<T, paimon::Error>) -> T {
    result.expect("valid paimon type")
}

/// Every Paimon type the store supports, with a column of sample values in the
/// Arrow type fluss-rs uses for it.
fn supported() -> Vec<(P, ArrayRef)> {
    let ts = |unit: TimeUnit, tz: Option<&str>| -> ArrayRef {
        let values = vec![Some(1_700_000_000), None, Some(-1)];
        let array: ArrayRef = match unit {
            TimeUnit::Second => Arc::new(TimestampSecondArray::from(values)),
            TimeUnit::Millisecond => Arc::new(TimestampMillisecondArray::from(values)),
            TimeUnit::Microsecond => Arc::new(TimestampMicrosecondArray::from(values)),
            TimeUnit::Nanosecond => Arc::new(TimestampNanosecondArray::from(values)),
        };
        match tz {
            Some(tz) => arrow::compute::cast(&array, &DataType::Timestamp(unit, Some(tz.into())))
                .expect("timezone cast"),
            None => array,
        }
    };
    vec![
        (
            P::Boolean(BooleanType::new()),
            Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
        ),
        (
            P::TinyInt(TinyIntType::new()),
            Arc::new(Int8Array::from(vec![Some(-128), None, Some(127)])),
        ),
        (
            P::SmallInt(SmallIntType::new()),
            Arc::new(Int16Array::from(vec![Some(i16::MIN), None, Some(i16::MAX)])),
        ),
        (
            P::Int(IntType::with_nullable(false)),
            Arc::new(Int32Array::from(vec![i32::MIN, 0, i32::MAX])),
        ),
        (
            P::BigInt(BigIntType::new()),
            Arc::new(Int64Array::from(vec![Some(i64::MIN), None, Some(i64::MAX)])),
        ),
        (
            P::Float(FloatType::new()),
            Arc::new(Float32Array::from(vec![Some(1.5), None, Some(f32::NAN)])),
        ),
        (
            P::Double(DoubleType::new()),
            Arc::new(Float64Array::from(vec![
                Some(-2.25),
                None,
                Some(f64::INFINITY),
            ])),
        ),
        (
            P::Decimal(ok(DecimalType::new(10, 2))),
            Arc::new(
                Decimal128Array::from(vec![Some(12345), None, Some(-1)])
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ),
        (
            P::Date(DateType::new()),
            Arc::new(Date32Array::from(vec![Some(19_000), None, Some(-1)])),
        ),
        (
            P::Time(ok(TimeType::new(0))),
            Arc::new(Time32SecondArray::from(vec![Some(3600), None, Some(0)])),
        ),
        (
            P::Time(ok(TimeType::new(3))),
            Arc::new(Time32MillisecondArray::from(vec![
                Some(3_600_123),
                None,
                Some(0),
            ])),
        ),
        (
            P::Timestamp(ok(TimestampType::new(0))),
            ts(TimeUnit::Second, None),
        ),
        (
            P::Timestamp(ok(TimestampType::new(3))),
            ts(TimeUnit::Millisecond, None),
        ),
        (
            P::Timestamp(ok(TimestampType::new(6))),
            ts(TimeUnit::Microsecond, None),
        ),
        (
            P::Timestamp(ok(TimestampType::new(9))),
            ts(TimeUnit::Nanosecond, None),
        ),
        (
            P::LocalZonedTimestamp(ok(LocalZonedTimestampType::new(3))),
            ts(TimeUnit::Millisecond, Some("UTC")),
        ),
        (
            P::LocalZonedTimestamp(ok(LocalZonedTimestampType::new(6))),
            ts(TimeUnit::Microsecond, Some("UTC")),
        ),
        (
            P::Char(ok(CharType::new(3))),
            Arc::new(StringArray::from(vec![Some("abc"), None, Some("x  ")])),
        ),
        (
            P::VarChar(VarCharType::string_type()),
            Arc::new(StringArray::from(vec![Some("paimon"), None, Some("")])),
        ),
        (
            P::Binary(ok(BinaryType::new(2))),
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    vec![Some(vec![1u8, 2]), None, Some(vec![0, 0])].into_iter(),
                    2,
                )
                .expect("fixed binary"),
            ),
        ),
        (
            P::VarBinary(ok(VarBinaryType::new(VarBinaryType::MAX_LENGTH))),
            Arc::new(BinaryArray::from(vec![
                Some(b"fluss".as_ref()),
                None,
                Some(b"".as_ref()),
            ])),
        ),
    ]
}

fn sample_batch() -> RecordBatch {
    let columns = supported();
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, (paimon, array))| {
            let fluss = fluss_type(paimon).expect("supported type");
            let arrow = fluss_arrow_type(&fluss).expect("arrow type");
            assert_eq!(&arrow, array.data_type(), "column {i}: {paimon:?}");
            Field::new(format!("c{i}"), arrow, paimon.is_nullable())
        })
        .collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("batch")
}

/// The address of a column's values buffer, to see that no bytes were copied.
fn values_address(array: &dyn Array) -> *const u8 {
    let data = array.to_data();
    data.buffers()
        .last()
        .map_or(std::ptr::null(), |b| b.as_ptr())
}

#[test]
fn every_supported_type_round_trips_through_arrow_59_without_copies() {
    let batch = sample_batch();
    let crossed = to_arrow59(&batch).expect("to arrow 59");
    assert_eq!(crossed.num_rows(), batch.num_rows());
    assert_eq!(crossed.num_columns(), batch.num_columns());
    for (i, column) in crossed.columns().iter().enumerate() {
        let ours = batch.column(i).to_data();
        let theirs = arrow59::array::Array::to_data(column.as_ref());
        assert_eq!(
            ours.buffers().last().map(|b| b.as_ptr()),
            theirs.buffers().last().map(|b| b.as_ptr()),
            "column {i} was copied on the way to arrow 59"
        );
        assert_eq!(
            format!("{:?}", ours.data_type()),
            format!("{:?}", theirs.data_type()),
            "column {i}"
        );
    }
    let back = from_arrow59(&crossed).expect("back to arrow 58");
    assert_eq!(back, batch);
    for i in 0..batch.num_columns() {
        assert_eq!(
            values_address(back.column(i).as_ref()),
            values_address(batch.column(i).as_ref()),
            "column {i} was copied on the way back"
        );
    }
}

#[test]
fn a_batch_without_columns_keeps_its_row_count() {
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(7)),
    )
    .expect("empty batch");
    let back = from_arrow59(&to_arrow59(&batch).expect("to 59")).expect("back");
    assert_eq!(back.num_rows(), 7);
}

#[test]
fn sliced_batches_cross_with_their_offsets() {
    let batch = sample_batch().slice(1, 2);
    let back = from_arrow59(&to_arrow59(&batch).expect("to 59")).expect("back");
    assert_eq!(back, batch);
}

#[test]
fn types_fluss_cannot_hold_are_named() {
    let varchar = P::VarChar(VarCharType::new(10).expect("varchar"));
    let reason = fluss_type(&varchar).expect_err("VARCHAR(10)");
    assert!(reason.contains("VARCHAR(10)"), "{reason}");
    assert!(reason.contains("STRING"), "{reason}");
}

#[test]
fn a_cluster_is_named_by_any_of_its_servers() {
    use crate::store::StoreFactory;
    let factory = super::FlussStoreFactory;
    assert!(factory.same_location("h1:1,h2:1", "H2:1, h3:1"));
    assert!(!factory.same_location("h1:1", "h2:1"));
    assert!(!factory.same_location("", "h2:1"));
}
