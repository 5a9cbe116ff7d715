//! Printing query results in the formats the CLI offers.

use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// An ASCII table, as datafusion-cli prints.
    #[default]
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of objects per result.
    Json,
    /// One JSON object per line.
    Ndjson,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "table" => Ok(Format::Table),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            "ndjson" => Ok(Format::Ndjson),
            other => Err(format!(
                "unknown format '{other}': use table, csv, json or ndjson"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Table => "table",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Ndjson => "ndjson",
        })
    }
}

/// Whether a result is `SQLContext`'s acknowledgement of DDL: one `result`
/// row saying `OK`. Shells print a line for it rather than a table.
pub fn is_acknowledgement(batches: &[RecordBatch]) -> bool {
    let [batch] = batches else { return false };
    let schema = batch.schema();
    batch.num_rows() == 1
        && schema.fields().len() == 1
        && schema.field(0).name() == "result"
        && matches!(
            schema.field(0).data_type(),
            arrow::datatypes::DataType::Utf8
        )
}

/// Whether a statement's result says only that it was done, and the shells
/// answer `OK` for it: `SQLContext`'s acknowledgement of DDL
/// ([`is_acknowledgement`]), or a result without columns (`SET`,
/// `CREATE EXTERNAL TABLE`, DataFusion's own DDL).
pub fn acknowledges(schema: &SchemaRef, batches: &[RecordBatch]) -> bool {
    schema.fields().is_empty() || is_acknowledgement(batches)
}

/// Writes one statement's result.
pub fn write_batches(
    out: &mut dyn Write,
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<(), ArrowError> {
    write_part(out, format, schema, batches, true)
}

/// Writes part of a result that arrives in parts (a streaming read): only
/// the `first` part carries the CSV header.
pub fn write_part(
    out: &mut dyn Write,
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    first: bool,
) -> Result<(), ArrowError> {
    // Statements without columns (SET) have nothing to show.
    if schema.fields().is_empty() {
        return Ok(());
    }
    match format {
        Format::Table => {
            let table = arrow::util::pretty::pretty_format_batches_with_schema(
                Arc::clone(schema),
                batches,
            )?;
            writeln!(out, "{table}")?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(first)
                .build(&mut *out);
            if batches.is_empty() && first {
                writer.write(&RecordBatch::new_empty(Arc::clone(schema)))?;
            }
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = arrow::json::ArrayWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            // The writer prints `[]` for no rows itself.
            writer.finish()?;
            writeln!(out)?;
        }
        Format::Ndjson => {
            let mut writer = arrow::json::LineDelimitedWriter::new(&mut *out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn render(format: Format, rows: bool) -> String {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let batches = if rows {
            vec![RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int32Array::from(vec![1, 2])),
                    Arc::new(StringArray::from(vec![Some("a"), None])),
                ],
            )
            .unwrap()]
        } else {
            vec![]
        };
        let mut out = Vec::new();
        write_batches(&mut out, format, &schema, &batches).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn results_without_columns_are_acknowledgements() {
        let none = Arc::new(Schema::empty());
        assert!(acknowledges(&none, &[]));
        let ok = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "result",
                DataType::Utf8,
                false,
            )])),
            vec![Arc::new(StringArray::from(vec!["OK"]))],
        )
        .unwrap();
        assert!(acknowledges(&ok.schema(), std::slice::from_ref(&ok)));
        let rows = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        assert!(!acknowledges(&rows, &[]));
    }

    #[test]
    fn every_format_renders_rows_and_empty_results() {
        assert!(render(Format::Table, true).contains("| 1  | a |"));
        assert!(render(Format::Table, false).contains("| id | v |"));
        assert_eq!(render(Format::Csv, true), "id,v\n1,a\n2,\n");
        assert_eq!(render(Format::Csv, false), "id,v\n");
        assert_eq!(
            render(Format::Json, true),
            "[{\"id\":1,\"v\":\"a\"},{\"id\":2}]\n"
        );
        assert_eq!(render(Format::Json, false), "[]\n");
        assert_eq!(
            render(Format::Ndjson, true),
            "{\"id\":1,\"v\":\"a\"}\n{\"id\":2}\n"
        );
        assert_eq!(render(Format::Ndjson, false), "");
        assert_eq!("JSON".parse::<Format>(), Ok(Format::Json));
        assert!("xml".parse::<Format>().is_err());
    }
}
