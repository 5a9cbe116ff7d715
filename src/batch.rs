//! The one place rows are cast to the column types a table, a store or a
//! read wants.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;

/// A batch of `schema` holding `columns`, one per field in order, each cast
/// to its field's type where it differs. A value that does not cast is an
/// error, never a null: rows a store holds under a column whose type changed
/// since stop there rather than lose the value. A batch of no columns keeps
/// its `rows` (as `count(*)` reads need).
pub(crate) fn cast_to(
    schema: &SchemaRef,
    columns: impl IntoIterator<Item = ArrayRef>,
    rows: usize,
) -> Result<RecordBatch, ArrowError> {
    let columns: Vec<ArrayRef> = columns.into_iter().collect();
    if columns.len() != schema.fields().len() {
        return Err(ArrowError::SchemaError(format!(
            "{} columns for a schema of {} fields",
            columns.len(),
            schema.fields().len()
        )));
    }
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column)
            } else {
                let strict = CastOptions {
                    safe: false,
                    ..CastOptions::default()
                };
                cast_with_options(&column, field.data_type(), &strict)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn schema(fields: Vec<Field>) -> SchemaRef {
        Arc::new(Schema::new(fields))
    }

    #[test]
    fn casts_what_differs_and_keeps_what_matches() {
        let target = schema(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int32, true),
        ]);
        let a: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        let b: ArrayRef = Arc::new(Int32Array::from(vec![Some(3), None]));
        let batch = cast_to(&target, [a, Arc::clone(&b)], 2).unwrap();
        let a = batch.column(0).as_any().downcast_ref::<Int64Array>();
        assert_eq!(a.map(|a| a.values().to_vec()), Some(vec![1, 2]));
        assert!(Arc::ptr_eq(batch.column(1), &b));
    }

    /// A value the new type cannot hold is an error, not a null.
    #[test]
    fn a_value_that_does_not_cast_is_an_error() {
        use datafusion::arrow::array::StringArray;
        let target = schema(vec![Field::new("c", DataType::Int32, true)]);
        let c: ArrayRef = Arc::new(StringArray::from(vec![Some("7"), None]));
        let batch = cast_to(&target, [c], 2).unwrap();
        assert_eq!(batch.column(0).null_count(), 1);
        let c: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        assert!(cast_to(&target, [c], 1).is_err());
    }

    #[test]
    fn a_batch_of_no_columns_keeps_its_rows() {
        let batch = cast_to(&schema(vec![]), [], 7).unwrap();
        assert_eq!(batch.num_rows(), 7);
    }

    #[test]
    fn a_wrong_number_of_columns_or_a_null_in_a_not_null_field_is_an_error() {
        let target = schema(vec![Field::new("a", DataType::Int32, false)]);
        let column: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None]));
        assert!(cast_to(&target, [], 0).is_err());
        assert!(cast_to(&target, [Arc::clone(&column), column.slice(0, 1)], 1).is_err());
        assert!(cast_to(&target, [column], 2).is_err());
    }
}
