//! Arrow 58 (DataFusion, Paimon) <-> arrow 59 (fluss-rs), through the Arrow C
//! Data Interface. The two versions share no Rust types, but both speak the C
//! ABI: a batch is exported as one struct array by one version and imported by
//! the other. The buffers are not copied; the importing side keeps the
//! exporting side's memory alive until its own arrays are dropped.
//!
//! This is the only module of the crate that names arrow 59.

use std::sync::Arc;

use arrow::array::{Array as _, RecordBatch, RecordBatchOptions, StructArray};
use arrow::datatypes::{Schema, SchemaRef};
use arrow59::array::Array as _;

/// arrow 59's record batch, as fluss-rs produces and takes them.
pub(crate) type Batch59 = arrow59::array::RecordBatch;

/// Why a batch could not cross.
#[derive(Debug, thiserror::Error)]
#[error("cannot move an Arrow batch between arrow 58 and arrow 59: {0}")]
pub struct BridgeError(String);

/// An arrow 58 batch as arrow 59, sharing its buffers.
pub(crate) fn to_arrow59(batch: &RecordBatch) -> Result<Batch59, BridgeError> {
    let rows = batch.num_rows();
    let data = StructArray::from(batch.clone()).into_data();
    let array = arrow::ffi::FFI_ArrowArray::new(&data);
    let schema = arrow::ffi::FFI_ArrowSchema::try_from(data.data_type())
        .map_err(|e| BridgeError(e.to_string()))?;
    // SAFETY: FFI_ArrowArray and FFI_ArrowSchema are the `#[repr(C)]` structs
    // of the C Data Interface in both arrow versions; ownership (the release
    // callback) moves with the struct, so nothing is released twice.
    let (array, schema) = unsafe { move_ffi_58_to_59(array, schema) };
    // SAFETY: the structs were produced by arrow's own exporter just above.
    let data = unsafe { arrow59::ffi::from_ffi(array, &schema) }
        .map_err(|e| BridgeError(e.to_string()))?;
    let array = arrow59::array::StructArray::from(data);
    let (fields, columns, nulls) = array.into_parts();
    if nulls.is_some_and(|n| n.null_count() > 0) {
        return Err(BridgeError(
            "a record batch cannot have null rows".to_string(),
        ));
    }
    let schema = Arc::new(arrow59::datatypes::Schema::new(fields));
    let options = arrow59::array::RecordBatchOptions::new().with_row_count(Some(rows));
    Batch59::try_new_with_options(schema, columns, &options).map_err(|e| BridgeError(e.to_string()))
}

/// An arrow 59 batch as arrow 58, sharing its buffers.
pub(crate) fn from_arrow59(batch: &Batch59) -> Result<RecordBatch, BridgeError> {
    let rows = batch.num_rows();
    let data = arrow59::array::StructArray::from(batch.clone()).into_data();
    let array = arrow59::ffi::FFI_ArrowArray::new(&data);
    let schema = arrow59::ffi::FFI_ArrowSchema::try_from(data.data_type())
        .map_err(|e| BridgeError(e.to_string()))?;
    // SAFETY: as in `to_arrow59`, the other way round.
    let (array, schema) = unsafe { move_ffi_59_to_58(array, schema) };
    // SAFETY: the structs were produced by arrow's own exporter just above.
    let data =
        unsafe { arrow::ffi::from_ffi(array, &schema) }.map_err(|e| BridgeError(e.to_string()))?;
    let array = StructArray::from(data);
    let (fields, columns, nulls) = array.into_parts();
    if nulls.is_some_and(|n| n.null_count() > 0) {
        return Err(BridgeError(
            "a record batch cannot have null rows".to_string(),
        ));
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema, columns, &options)
        .map_err(|e| BridgeError(e.to_string()))
}

unsafe fn move_ffi_58_to_59(
    mut array: arrow::ffi::FFI_ArrowArray,
    mut schema: arrow::ffi::FFI_ArrowSchema,
) -> (arrow59::ffi::FFI_ArrowArray, arrow59::ffi::FFI_ArrowSchema) {
    // `from_raw` moves the struct out and leaves an empty (released) one behind.
    let array = arrow59::ffi::FFI_ArrowArray::from_raw(
        (&mut array as *mut arrow::ffi::FFI_ArrowArray).cast(),
    );
    let schema = arrow59::ffi::FFI_ArrowSchema::from_raw(
        (&mut schema as *mut arrow::ffi::FFI_ArrowSchema).cast(),
    );
    (array, schema)
}

unsafe fn move_ffi_59_to_58(
    mut array: arrow59::ffi::FFI_ArrowArray,
    mut schema: arrow59::ffi::FFI_ArrowSchema,
) -> (arrow::ffi::FFI_ArrowArray, arrow::ffi::FFI_ArrowSchema) {
    let array = arrow::ffi::FFI_ArrowArray::from_raw(
        (&mut array as *mut arrow59::ffi::FFI_ArrowArray).cast(),
    );
    let schema = arrow::ffi::FFI_ArrowSchema::from_raw(
        (&mut schema as *mut arrow59::ffi::FFI_ArrowSchema).cast(),
    );
    (array, schema)
}
