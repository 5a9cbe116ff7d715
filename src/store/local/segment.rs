//! The log segment: the unit the `local` store writes, one per group commit.
//!
//! ```text
//! "LSSEG002"            8 bytes, magic and format version
//! u64 little-endian     length of the payload
//! u64 little-endian     rows in the payload
//! u128 little-endian    the write's id, unique to the write
//! u32 little-endian     CRC-32 of the 40 bytes before it (the header's own check)
//! payload               an Arrow IPC stream: the rows, the table's columns + row kind
//!                       (see [`log_schema`])
//! u64 little-endian     rows again
//! u64 little-endian     length of the payload again
//! u32 little-endian     CRC-32 of the 16 bytes before it (the tail's own check)
//! u32 little-endian     CRC-32 of everything before it
//! ```
//!
//! The write id makes two writes of the same rows different bytes: a writer
//! that finds its segment's name taken can tell its own put (retried by the
//! object store after a lost answer) from another writer's.
//!
//! A segment reaches its name whole (see `Root::put_new`), so bytes that do
//! not verify are damage, never a write in progress: decoding them is an
//! error, and the row count survives in the header or the tail so that an
//! operator setting the segment aside learns how many rows it held.
//! Segments of the first format (`LSSEG001`: magic, length, payload, CRC)
//! are still read.
//!
//! A write too big for one segment is a **multi-part write**: its rows go to
//! part segments (the format above) outside the log, then one log entry,
//! framed the same way with the magic `LSPRT001`, commits them as a unit.
//! Its payload is a JSON [`PartList`]: the write's id (which names the
//! directory of its parts), the columns of its rows, and each part's row
//! count and length, so a part that is missing or replaced is damage.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use paimon::table::Table;

use crate::store::table_arrow_schema;

const MAGIC: &[u8; 8] = b"LSSEG002";
const PARTS_MAGIC: &[u8; 8] = b"LSPRT001";
const MAGIC_V1: &[u8; 8] = b"LSSEG001";
const HEADER_LEN: usize = 8 + 8 + 8 + 16 + 4;
const TRAILER_LEN: usize = 8 + 8 + 4 + 4;
const V1_HEADER_LEN: usize = 8 + 8;
const V1_TRAILER_LEN: usize = 4;

/// The column a segment's rows carry after the table's columns: each row's
/// [`crate::store::RowKind`] code ([`crate::store::RowKind::as_i8`]). Part of
/// the file format: segments written earlier name it so.
pub(crate) const ROW_KIND_COLUMN: &str = "_lakestream_row_kind";

/// The schema of a table's segments: the table's columns in
/// [`table_arrow_schema`] form, then [`ROW_KIND_COLUMN`] (`Int8`).
pub(crate) fn log_schema(table: &Table) -> crate::error::Result<SchemaRef> {
    let schema = table_arrow_schema(table)?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(ROW_KIND_COLUMN, DataType::Int8, false));
    Ok(Arc::new(Schema::new(fields)))
}

/// Why bytes are not a segment.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SegmentError {
    /// The bytes do not verify: wrong magic, length or checksum. Segments
    /// are never visible part-written, so this is damage.
    #[error("damaged: {0}")]
    Damaged(String),
    /// The checksum matched but the rows could not be read: a bug or an
    /// incompatible change.
    #[error("rows cannot be read: {0}")]
    Unreadable(#[from] ArrowError),
}

/// Encodes `batches` (all with `schema`) as the segment of write `write_id`.
pub(crate) fn encode(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    write_id: u128,
) -> Result<Vec<u8>, ArrowError> {
    let mut payload = Vec::new();
    {
        let mut writer = StreamWriter::try_new(&mut payload, schema)?;
        for batch in batches {
            writer.write(batch)?;
        }
        writer.finish()?;
    }
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    Ok(frame(MAGIC, &payload, rows, write_id))
}

/// One part of a multi-part write, as its log entry records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Part {
    pub(crate) rows: u64,
    /// The part segment's length in bytes.
    pub(crate) length: u64,
}

/// The log entry of a multi-part write: what it commits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PartList {
    /// The write's id in hex: its parts lie in `parts/<write_id>/`.
    pub(crate) write_id: String,
    /// The names of the columns its rows have (the table's at the time, then
    /// the row kind).
    pub(crate) columns: Vec<String>,
    /// Its parts, in order.
    pub(crate) parts: Vec<Part>,
}

impl PartList {
    pub(crate) fn rows(&self) -> u64 {
        self.parts.iter().map(|p| p.rows).sum()
    }
}

/// What a log entry holds.
#[derive(Debug)]
pub(crate) enum Entry {
    /// Rows, as written.
    Rows(Vec<RecordBatch>),
    /// The parts of a multi-part write.
    Parts(PartList),
}

/// Encodes the log entry that commits the parts of `list`.
pub(crate) fn encode_parts(list: &PartList, write_id: u128) -> Result<Vec<u8>, serde_json::Error> {
    let payload = serde_json::to_vec(list)?;
    Ok(frame(PARTS_MAGIC, &payload, list.rows(), write_id))
}

/// Frames `payload` with the format-2 header and tail.
fn frame(magic: &[u8; 8], payload: &[u8], rows: u64, write_id: u128) -> Vec<u8> {
    let length = payload.len() as u64;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(magic);
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&write_id.to_le_bytes());
    let header_crc = crc32fast::hash(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    let tail_start = out.len();
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&length.to_le_bytes());
    let tail_crc = crc32fast::hash(&out[tail_start..]);
    out.extend_from_slice(&tail_crc.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let slice = bytes.get(at..at.checked_add(8)?)?;
    let mut buf = [0u8; 8];
    buf.copy_from_slice(slice);
    Some(u64::from_le_bytes(buf))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let slice = bytes.get(at..at.checked_add(4)?)?;
    let mut buf = [0u8; 4];
    buf.copy_from_slice(slice);
    Some(u32::from_le_bytes(buf))
}

/// The row count a segment's header or tail vouches for (each has its own
/// checksum), even when the rest of the segment is damaged.
pub(crate) fn rows_hint(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..HEADER_LEN - 4)?;
    let magic = header.get(..8);
    if (magic == Some(MAGIC.as_slice()) || magic == Some(PARTS_MAGIC.as_slice()))
        && u32_at(bytes, HEADER_LEN - 4) == Some(crc32fast::hash(header))
    {
        return u64_at(bytes, 16);
    }
    let tail_start = bytes.len().checked_sub(TRAILER_LEN)?;
    let tail = bytes.get(tail_start..tail_start + 16)?;
    if u32_at(bytes, tail_start + 16) == Some(crc32fast::hash(tail)) {
        return u64_at(bytes, tail_start);
    }
    None
}

/// The payload of a segment framed by a `header_len`-byte header (magic,
/// then the payload's length) and a `trailer_len`-byte trailer ending in the
/// CRC-32 of everything before it, if the frame verifies.
fn payload(bytes: &[u8], header_len: usize, trailer_len: usize) -> Result<&[u8], SegmentError> {
    let damaged = |what: String| Err(SegmentError::Damaged(what));
    let Some(length) = u64_at(bytes, 8) else {
        return damaged(format!("only {} bytes", bytes.len()));
    };
    let expected = (header_len as u64)
        .checked_add(length)
        .and_then(|n| n.checked_add(trailer_len as u64));
    if expected != Some(bytes.len() as u64) {
        return damaged(format!(
            "{} bytes where the header announces a {length}-byte payload",
            bytes.len()
        ));
    }
    let body_end = bytes.len() - 4;
    if u32_at(bytes, body_end) != Some(crc32fast::hash(&bytes[..body_end])) {
        return damaged("checksum mismatch".to_string());
    }
    Ok(&bytes[header_len..bytes.len() - trailer_len])
}

/// Whether `bytes` (at least the first 8 of an object) begin a multi-part
/// write's log entry.
pub(crate) fn is_part_list(head: &[u8]) -> bool {
    head.get(..8) == Some(PARTS_MAGIC.as_slice())
}

/// Whether `head`, an object's first 8 bytes at least, starts a segment of
/// rows (either format), which names no parts.
pub(crate) fn is_segment(head: &[u8]) -> bool {
    matches!(head.get(..8), Some(magic) if magic == MAGIC.as_slice() || magic == MAGIC_V1.as_slice())
}

/// What a log entry whose bytes verify holds. Anything else is
/// [`SegmentError::Damaged`].
pub(crate) fn decode_entry(bytes: &[u8]) -> Result<Entry, SegmentError> {
    if is_part_list(bytes) {
        let payload = payload(bytes, HEADER_LEN, TRAILER_LEN)?;
        let list: PartList = serde_json::from_slice(payload).map_err(|e| {
            SegmentError::Damaged(format!(
                "the part list does not parse, yet its checksum matched: {e}"
            ))
        })?;
        return Ok(Entry::Parts(list));
    }
    decode(bytes).map(Entry::Rows)
}

/// The rows of a segment whose bytes verify. Anything else is
/// [`SegmentError::Damaged`].
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<RecordBatch>, SegmentError> {
    let payload = match bytes.get(..8) {
        Some(magic) if magic == MAGIC.as_slice() => payload(bytes, HEADER_LEN, TRAILER_LEN)?,
        Some(magic) if magic == MAGIC_V1.as_slice() => {
            payload(bytes, V1_HEADER_LEN, V1_TRAILER_LEN)?
        }
        _ => {
            return Err(SegmentError::Damaged(
                "not a segment (wrong magic)".to_string(),
            ))
        }
    };
    let reader = StreamReader::try_new(Cursor::new(payload), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}

/// The rows of part `part` of a multi-part write, if its bytes verify and
/// match what the write's entry records of it; otherwise why not.
pub(crate) fn decode_part(bytes: &[u8], part: &Part) -> Result<Vec<RecordBatch>, String> {
    if bytes.len() as u64 != part.length {
        return Err(format!(
            "{} bytes where the write's entry records {}",
            bytes.len(),
            part.length
        ));
    }
    let batches = decode(bytes).map_err(|e| e.to_string())?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != part.rows {
        return Err(format!(
            "{rows} rows where the write's entry records {}",
            part.rows
        ));
    }
    Ok(batches)
}

/// Lines a batch written under an older schema up with `schema`, by column
/// name: a column added since is null, a widened type is cast. The row kind
/// is the last column of both, and is taken by position, never by name: a
/// table may have a column of its name.
pub(crate) fn align(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let written = batch.schema();
    let (Some((_, fields)), Some((kinds, columns))) =
        (schema.fields().split_last(), batch.columns().split_last())
    else {
        return Err(ArrowError::SchemaError(format!(
            "a log batch and its table's log schema need a row kind column; they have {} and \
             {} columns",
            batch.num_columns(),
            schema.fields().len()
        )));
    };
    let table_columns = &written.fields()[..columns.len()];
    let aligned = fields
        .iter()
        .map(|field| {
            match table_columns
                .iter()
                .position(|written| written.name() == field.name())
            {
                Some(index) => Arc::clone(&columns[index]),
                None => new_null_array(field.data_type(), batch.num_rows()),
            }
        })
        .chain(std::iter::once(Arc::clone(kinds)));
    crate::batch::cast_to(schema, aligned, batch.num_rows())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int8Array, StringArray};

    use super::*;

    #[test]
    fn the_row_kind_column_keeps_its_name() {
        // Segments on disk name it so: renaming it would leave them unread.
        assert_eq!(ROW_KIND_COLUMN, "_lakestream_row_kind");
    }

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
        let bytes = encode(&b.schema(), &[b.clone(), b.clone()], 7).unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded, vec![b.clone(), b]);
    }

    #[test]
    fn every_truncation_and_every_flipped_bit_is_damage_with_its_row_count() {
        let b = batch();
        let bytes = encode(&b.schema(), &[b], 7).unwrap();
        assert_eq!(rows_hint(&bytes), Some(3));
        for len in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..len]), Err(SegmentError::Damaged(_))),
                "truncated to {len}"
            );
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut corrupt = bytes.clone();
                corrupt[i] ^= 1 << bit;
                assert!(
                    matches!(decode(&corrupt), Err(SegmentError::Damaged(_))),
                    "byte {i} bit {bit} flipped"
                );
                // One flipped bit spoils the header or the tail, not both.
                assert_eq!(rows_hint(&corrupt), Some(3), "byte {i} bit {bit} flipped");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(SegmentError::Damaged(_))));
    }

    #[test]
    fn part_lists_round_trip_and_every_flipped_bit_is_damage() {
        let list = PartList {
            write_id: "abc".to_string(),
            columns: vec!["id".to_string(), "_lakestream_row_kind".to_string()],
            parts: vec![
                Part {
                    rows: 3,
                    length: 10,
                },
                Part {
                    rows: 4,
                    length: 12,
                },
            ],
        };
        let bytes = encode_parts(&list, 9).unwrap();
        assert!(is_part_list(&bytes));
        assert_eq!(rows_hint(&bytes), Some(7));
        match decode_entry(&bytes).unwrap() {
            Entry::Parts(decoded) => assert_eq!(decoded, list),
            Entry::Rows(_) => panic!("a part list decoded as rows"),
        }
        for i in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= 0x10;
            assert!(
                matches!(decode_entry(&corrupt), Err(SegmentError::Damaged(_))),
                "byte {i} flipped"
            );
        }
        // A rows segment is never taken for a part list, and vice versa.
        let b = batch();
        let rows = encode(&b.schema(), &[b], 7).unwrap();
        assert!(!is_part_list(&rows));
        assert!(matches!(decode_entry(&rows).unwrap(), Entry::Rows(_)));
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn first_format_segments_still_read() {
        let b = batch();
        let mut payload = Vec::new();
        {
            let mut writer = StreamWriter::try_new(&mut payload, &b.schema()).unwrap();
            writer.write(&b).unwrap();
            writer.finish().unwrap();
        }
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        v1.extend_from_slice(&payload);
        let crc = crc32fast::hash(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&v1).unwrap(), vec![b]);
        v1[3] ^= 1;
        assert!(matches!(decode(&v1), Err(SegmentError::Damaged(_))));
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

    /// A table column named like the row kind column is the table's: the
    /// row kind is the last column, whatever the names say.
    #[test]
    fn align_takes_the_row_kind_by_position() {
        let written = Arc::new(Schema::new(vec![
            Field::new("_lakestream_row_kind", DataType::Int8, true),
            Field::new("_lakestream_row_kind", DataType::Int8, false),
        ]));
        let b = RecordBatch::try_new(
            Arc::clone(&written),
            vec![
                Arc::new(Int8Array::from(vec![3, 3])),
                Arc::new(Int8Array::from(vec![0, 0])),
            ],
        )
        .unwrap();
        let wider = Arc::new(Schema::new(vec![
            Field::new("_lakestream_row_kind", DataType::Int8, true),
            Field::new("added", DataType::Utf8, true),
            Field::new("_lakestream_row_kind", DataType::Int8, false),
        ]));
        let aligned = align(&b, &wider).unwrap();
        let kinds = aligned
            .column(2)
            .as_any()
            .downcast_ref::<Int8Array>()
            .unwrap();
        assert_eq!(kinds.values().to_vec(), vec![0, 0]);
        let user = aligned
            .column(0)
            .as_any()
            .downcast_ref::<Int8Array>()
            .unwrap();
        assert_eq!(user.values().to_vec(), vec![3, 3]);
    }
}
