//! The log segment: the unit the `local` store writes, one per group commit.
//!
//! ```text
//! "LSSEG001"            8 bytes, magic and format version
//! u64 little-endian     length of the payload
//! payload               an Arrow IPC stream: the rows, the table's columns + row kind
//! u32 little-endian     CRC-32 of everything before it
//! ```
//!
//! The checksum is what tells a complete segment from a torn one: a segment
//! whose length or checksum does not match is not a segment, whatever bytes
//! it happens to hold.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;

const MAGIC: &[u8; 8] = b"LSSEG001";
const HEADER_LEN: usize = MAGIC.len() + 8;
const TRAILER_LEN: usize = 4;

/// Why bytes are not a segment.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SegmentError {
    /// Shorter or longer than its header says, or no header: a write that
    /// stopped part way. Such a write was never acknowledged.
    #[error("not a complete segment: {0}")]
    Torn(String),
    /// Whole, but its checksum does not match: damaged after it was written.
    #[error("segment damaged: {0}")]
    Corrupt(String),
    /// The checksum matched but the rows could not be read: a bug or an
    /// incompatible change, never a torn write.
    #[error("segment rows cannot be read: {0}")]
    Unreadable(#[from] ArrowError),
}

/// Encodes `batches` (all with `schema`) as a segment.
pub(crate) fn encode(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let mut payload = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut payload, schema)?;
        for batch in batches {
            writer.write(batch)?;
        }
        writer.finish()?;
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a segment into its batches, as written.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<RecordBatch>, SegmentError> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(SegmentError::Torn(format!("{} bytes", bytes.len())));
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(SegmentError::Torn("wrong magic".to_string()));
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&bytes[MAGIC.len()..HEADER_LEN]);
    let length = u64::from_le_bytes(length);
    let expected = (HEADER_LEN as u64)
        .checked_add(length)
        .and_then(|n| n.checked_add(TRAILER_LEN as u64));
    if expected != Some(bytes.len() as u64) {
        return Err(SegmentError::Torn(format!(
            "length {} does not match the header's {length}",
            bytes.len()
        )));
    }
    let body = &bytes[..bytes.len() - TRAILER_LEN];
    let mut stored = [0u8; 4];
    stored.copy_from_slice(&bytes[bytes.len() - TRAILER_LEN..]);
    if crc32fast::hash(body) != u32::from_le_bytes(stored) {
        return Err(SegmentError::Corrupt("checksum mismatch".to_string()));
    }
    let reader = StreamReader::try_new(Cursor::new(&body[HEADER_LEN..]), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}

/// Lines a batch written under an older schema up with `schema`, by column
/// name: a column added since is null, a widened type is cast.
pub(crate) fn align(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(Arc::clone(column)),
            Some(column) => cast(column, field.data_type()),
            None => Ok(new_null_array(field.data_type(), batch.num_rows())),
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int8Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
            Field::new("_lakestream_row_kind", DataType::Int8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
                Arc::new(Int8Array::from(vec![0, 0, 3])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn round_trip() {
        let b = batch();
        let bytes = encode(&b.schema(), &[b.clone(), b.clone()]).unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded, vec![b.clone(), b]);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_detected() {
        let b = batch();
        let bytes = encode(&b.schema(), &[b]).unwrap();
        for len in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..len]), Err(SegmentError::Torn(_))),
                "truncated to {len}"
            );
        }
        for i in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= 0x40;
            assert!(
                matches!(
                    decode(&corrupt),
                    Err(SegmentError::Torn(_) | SegmentError::Corrupt(_))
                ),
                "byte {i} flipped"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(SegmentError::Torn(_))));
    }

    #[test]
    fn align_fills_added_columns_with_nulls() {
        let b = batch();
        let wider = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new("added", DataType::Utf8, true),
            Field::new("_lakestream_row_kind", DataType::Int8, false),
        ]));
        let aligned = align(&b, &wider).unwrap();
        assert_eq!(aligned.num_rows(), 3);
        assert_eq!(aligned.column(2).null_count(), 3);
        assert_eq!(aligned.column(0).data_type(), &DataType::Int64);
    }
}
