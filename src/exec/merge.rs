//! Merging the versions of a key as Paimon's merge engines do (see
//! [`crate::merge`] for which settings are reproduced).
//!
//! The versions of a key come in Paimon's order: Paimon's row for the key
//! first (the merged result of every older version), then the store's rows in
//! write order. Every engine here gives the same result for that sequence as
//! Paimon gives for the same writes after tiering, however tiering groups them
//! into commits: each is associative over that order. Like Paimon, a key with
//! a single version keeps that version as it is.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DFResult};

use crate::merge::{Aggregate, Engine, MergeSpec};

/// One version of a key: row `row` of input batch `batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) batch: usize,
    pub(crate) row: usize,
    /// A delete (`-D`), not an upsert.
    pub(crate) delete: bool,
}

/// The batches versions point into, all in the read's column layout.
pub(crate) struct Inputs {
    batches: Vec<RecordBatch>,
    /// The sequence columns of each batch, row-encoded in Paimon's order.
    sequences: Vec<Rows>,
}

/// Where a merged cell comes from.
#[derive(Debug, Clone)]
enum Cell {
    /// The cell of a version.
    Pick(usize, usize),
    /// NULL.
    Null,
    /// A computed value (an aggregate).
    Value(ScalarValue),
}

/// The merged version of a key.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    cells: Vec<Cell>,
    /// The winner is a delete: the key is gone (its row stays for what follows).
    pub(crate) delete: bool,
}

#[derive(Debug)]
enum Rule {
    Newest,
    Sequence {
        columns: Vec<usize>,
        converter: RowConverter,
    },
    PartialUpdate,
    /// The function of each column; `None` for primary-key columns.
    Aggregation(Vec<Option<Aggregate>>),
}

/// Merges versions of keys by a table's merge settings.
#[derive(Debug)]
pub(crate) struct Merger {
    rule: Rule,
    ignore_delete: bool,
    schema: SchemaRef,
    description: String,
}

impl Merger {
    /// `schema` is the read's column layout; it holds every column `spec`
    /// names that the merge needs (the sequence fields).
    pub(crate) fn new(spec: &MergeSpec, schema: SchemaRef) -> DFResult<Self> {
        let position = |name: &str| {
            schema.index_of(name).map_err(|_| {
                DataFusionError::Internal(format!(
                    "the union read's columns lack '{name}', which the merge needs"
                ))
            })
        };
        let rule = match spec.engine {
            Engine::Deduplicate if spec.sequence_fields.is_empty() => Rule::Newest,
            Engine::Deduplicate => {
                let columns = spec
                    .sequence_fields
                    .iter()
                    .map(|name| position(name))
                    .collect::<DFResult<Vec<_>>>()?;
                let options = SortOptions {
                    descending: spec.sequence_descending,
                    nulls_first: true,
                };
                let fields = columns
                    .iter()
                    .map(|&c| {
                        SortField::new_with_options(schema.field(c).data_type().clone(), options)
                    })
                    .collect();
                Rule::Sequence {
                    columns,
                    converter: RowConverter::new(fields)?,
                }
            }
            Engine::PartialUpdate => Rule::PartialUpdate,
            Engine::Aggregation => Rule::Aggregation(
                schema
                    .fields()
                    .iter()
                    .map(|f| spec.aggregates.get(f.name()).cloned())
                    .collect(),
            ),
        };
        Ok(Self {
            rule,
            ignore_delete: spec.ignore_delete,
            schema,
            description: spec.describe(),
        })
    }

    /// Whether the newest version wins outright.
    pub(crate) fn newest_wins(&self) -> bool {
        matches!(self.rule, Rule::Newest)
    }

    /// Whether deletes are dropped before they merge.
    pub(crate) fn ignores_deletes(&self) -> bool {
        self.ignore_delete
    }

    pub(crate) fn describe(&self) -> &str {
        &self.description
    }

    /// Prepares `batches` (in the read's layout) for merging.
    pub(crate) fn inputs(&self, batches: Vec<RecordBatch>) -> DFResult<Inputs> {
        let sequences = match &self.rule {
            Rule::Sequence { columns, converter } => batches
                .iter()
                .map(|batch| {
                    let columns: Vec<ArrayRef> = columns
                        .iter()
                        .map(|&c| Arc::clone(batch.column(c)))
                        .collect();
                    Ok(converter.convert_columns(&columns)?)
                })
                .collect::<DFResult<Vec<_>>>()?,
            _ => Vec::new(),
        };
        Ok(Inputs { batches, sequences })
    }

    /// The merged version of a key from its versions in Paimon's order, or
    /// `None` when none is left (only ignored deletes).
    pub(crate) fn merge(&self, inputs: &Inputs, versions: &[Version]) -> DFResult<Option<Outcome>> {
        let versions: Vec<Version> = versions
            .iter()
            .filter(|v| !(self.ignore_delete && v.delete))
            .copied()
            .collect();
        let (Some(first), Some(last)) = (versions.first(), versions.last()) else {
            return Ok(None);
        };
        let winner = match &self.rule {
            Rule::Newest => *last,
            Rule::Sequence { .. } => {
                // The largest sequence wins; on equal sequences the later write.
                let mut best = *first;
                for v in &versions[1..] {
                    let ordering = inputs.sequences[v.batch]
                        .row(v.row)
                        .cmp(&inputs.sequences[best.batch].row(best.row));
                    if ordering != Ordering::Less {
                        best = *v;
                    }
                }
                best
            }
            Rule::PartialUpdate | Rule::Aggregation(_) => {
                if versions.iter().any(|v| v.delete) {
                    return Err(DataFusionError::Execution(format!(
                        "the store holds a delete for a '{}' table, which Paimon refuses \
                         without 'ignore-delete'",
                        self.description
                    )));
                }
                if versions.len() == 1 {
                    *first
                } else {
                    return Ok(Some(Outcome {
                        cells: self.combine(inputs, &versions)?,
                        delete: false,
                    }));
                }
            }
        };
        Ok(Some(Outcome {
            cells: (0..self.schema.fields().len())
                .map(|_| Cell::Pick(winner.batch, winner.row))
                .collect(),
            delete: winner.delete,
        }))
    }

    /// Partial update and aggregation of two or more upserts.
    fn combine(&self, inputs: &Inputs, versions: &[Version]) -> DFResult<Vec<Cell>> {
        let is_null = |c: usize, v: &Version| inputs.batches[v.batch].column(c).is_null(v.row);
        let pick = |v: &Version| Cell::Pick(v.batch, v.row);
        let last_non_null = |c: usize| {
            versions
                .iter()
                .rev()
                .find(|v| !is_null(c, v))
                .map_or(Cell::Null, pick)
        };
        let scalar = |c: usize, v: &Version| {
            ScalarValue::try_from_array(inputs.batches[v.batch].column(c), v.row)
        };
        (0..self.schema.fields().len())
            .map(|c| {
                let function = match &self.rule {
                    Rule::Aggregation(functions) => match &functions[c] {
                        Some(function) => function,
                        // Primary-key columns: Paimon takes the last version's.
                        None => return Ok(versions.last().map_or(Cell::Null, pick)),
                    },
                    _ => return Ok(last_non_null(c)),
                };
                let non_null = || versions.iter().filter(|v| !is_null(c, v));
                Ok(match function {
                    Aggregate::LastValue => versions.last().map_or(Cell::Null, pick),
                    Aggregate::FirstValue => versions.first().map_or(Cell::Null, pick),
                    Aggregate::LastNonNullValue => last_non_null(c),
                    Aggregate::FirstNonNullValue => non_null().next().map_or(Cell::Null, pick),
                    Aggregate::Min | Aggregate::Max => {
                        let mut best: Option<(Version, ScalarValue)> = None;
                        for v in non_null() {
                            let value = scalar(c, v)?;
                            let better = match &best {
                                None => true,
                                Some((_, current)) => {
                                    let ordering = value.partial_cmp(current).ok_or_else(|| {
                                        DataFusionError::Internal(format!(
                                            "cannot compare {value:?} with {current:?}"
                                        ))
                                    })?;
                                    if *function == Aggregate::Min {
                                        ordering == Ordering::Less
                                    } else {
                                        ordering == Ordering::Greater
                                    }
                                }
                            };
                            if better {
                                best = Some((*v, value));
                            }
                        }
                        best.map_or(Cell::Null, |(v, _)| pick(&v))
                    }
                    Aggregate::Sum => {
                        let mut sum: Option<ScalarValue> = None;
                        for v in non_null() {
                            let value = scalar(c, v)?;
                            sum = Some(match sum {
                                None => value,
                                Some(acc) => wrapping_add(acc, value)?,
                            });
                        }
                        sum.map_or(Cell::Null, Cell::Value)
                    }
                    Aggregate::BoolAnd | Aggregate::BoolOr => {
                        let mut acc: Option<bool> = None;
                        for v in non_null() {
                            let ScalarValue::Boolean(Some(value)) = scalar(c, v)? else {
                                return Err(DataFusionError::Internal(
                                    "bool_and/bool_or on a non-boolean column".to_string(),
                                ));
                            };
                            acc = Some(match (acc, function) {
                                (None, _) => value,
                                (Some(a), Aggregate::BoolAnd) => a && value,
                                (Some(a), _) => a || value,
                            });
                        }
                        acc.map_or(Cell::Null, |b| Cell::Value(ScalarValue::Boolean(Some(b))))
                    }
                    Aggregate::ListAgg { delimiter } => {
                        let mut acc: Option<String> = None;
                        for v in non_null() {
                            let value = scalar(c, v)?;
                            let Some(text) = value.try_as_str().flatten() else {
                                return Err(DataFusionError::Internal(
                                    "listagg on a non-string column".to_string(),
                                ));
                            };
                            // Paimon skips blank values, and a blank accumulator.
                            if java_is_blank(text) {
                                continue;
                            }
                            acc = Some(match acc {
                                None => text.to_string(),
                                Some(previous) => format!("{previous}{delimiter}{text}"),
                            });
                        }
                        acc.map_or(Cell::Null, |s| Cell::Value(ScalarValue::Utf8(Some(s))))
                    }
                })
            })
            .collect()
    }

    /// The rows of `outcomes`, in the read's layout.
    pub(crate) fn build(&self, inputs: &Inputs, outcomes: &[&Outcome]) -> DFResult<RecordBatch> {
        let rows = outcomes.len();
        let columns = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(c, field)| {
                let data_type = field.data_type();
                let computed = outcomes
                    .iter()
                    .any(|o| matches!(o.cells[c], Cell::Value(_)));
                if computed {
                    let values = outcomes
                        .iter()
                        .map(|o| match &o.cells[c] {
                            Cell::Pick(b, r) => {
                                ScalarValue::try_from_array(inputs.batches[*b].column(c), *r)
                            }
                            Cell::Null => ScalarValue::try_from(data_type),
                            Cell::Value(v) if v.data_type() == *data_type => Ok(v.clone()),
                            Cell::Value(v) => v.cast_to(data_type),
                        })
                        .collect::<DFResult<Vec<_>>>()?;
                    if values.is_empty() {
                        return Ok(new_null_array(data_type, 0));
                    }
                    return ScalarValue::iter_to_array(values);
                }
                let null = new_null_array(data_type, 1);
                let mut arrays: Vec<&dyn Array> = inputs
                    .batches
                    .iter()
                    .map(|b| b.column(c).as_ref())
                    .collect();
                arrays.push(null.as_ref());
                let null_index = arrays.len() - 1;
                let indices: Vec<(usize, usize)> = outcomes
                    .iter()
                    .map(|o| match o.cells[c] {
                        Cell::Pick(b, r) => (b, r),
                        _ => (null_index, 0),
                    })
                    .collect();
                Ok(interleave(&arrays, &indices)?)
            })
            .collect::<DFResult<Vec<ArrayRef>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?)
    }
}

/// Java's `String.isBlank`, as Paimon's `listagg` uses it.
fn java_is_blank(value: &str) -> bool {
    value.chars().all(|ch| {
        matches!(
            ch,
            '\u{0009}'..='\u{000d}'
                | '\u{001c}'..='\u{0020}'
                | '\u{1680}'
                | '\u{2000}'..='\u{2006}'
                | '\u{2008}'..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{205f}'
                | '\u{3000}'
        )
    })
}

/// Integer addition that wraps on overflow, as Java's (and Paimon's) `sum` does.
fn wrapping_add(acc: ScalarValue, value: ScalarValue) -> DFResult<ScalarValue> {
    Ok(match (acc, value) {
        (ScalarValue::Int8(Some(a)), ScalarValue::Int8(Some(b))) => {
            ScalarValue::Int8(Some(a.wrapping_add(b)))
        }
        (ScalarValue::Int16(Some(a)), ScalarValue::Int16(Some(b))) => {
            ScalarValue::Int16(Some(a.wrapping_add(b)))
        }
        (ScalarValue::Int32(Some(a)), ScalarValue::Int32(Some(b))) => {
            ScalarValue::Int32(Some(a.wrapping_add(b)))
        }
        (ScalarValue::Int64(Some(a)), ScalarValue::Int64(Some(b))) => {
            ScalarValue::Int64(Some(a.wrapping_add(b)))
        }
        (a, b) => {
            return Err(DataFusionError::Internal(format!(
                "sum of {a:?} and {b:?} is not an integer sum"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BooleanArray, Int32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use std::collections::HashMap;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ]))
    }

    /// `k`, `a`, `s`, `b`.
    type Row<'a> = (i32, Option<i64>, Option<&'a str>, Option<bool>);

    fn batch(rows: &[Row]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2))),
                Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.3))),
            ],
        )
        .unwrap()
    }

    fn upserts(n: usize) -> Vec<Version> {
        (0..n)
            .map(|row| Version {
                batch: 0,
                row,
                delete: false,
            })
            .collect()
    }

    fn merged(spec: &MergeSpec, rows: &[Row]) -> String {
        let merger = Merger::new(spec, schema()).unwrap();
        let inputs = merger.inputs(vec![batch(rows)]).unwrap();
        let outcome = merger
            .merge(&inputs, &upserts(rows.len()))
            .unwrap()
            .unwrap();
        let out = merger.build(&inputs, &[&outcome]).unwrap();
        pretty_format_batches(&[out])
            .unwrap()
            .to_string()
            .lines()
            .nth(3)
            .unwrap()
            .to_string()
    }

    #[test]
    fn partial_update_takes_the_newest_non_null_value() {
        let spec = MergeSpec {
            engine: Engine::PartialUpdate,
            ..MergeSpec::plain()
        };
        let line = merged(
            &spec,
            &[
                (1, Some(1), None, Some(true)),
                (1, None, Some("x"), None),
                (1, Some(3), None, None),
            ],
        );
        assert_eq!(line, "| 1 | 3 | x | true |");
    }

    #[test]
    fn aggregation_combines_each_column() {
        let spec = MergeSpec {
            engine: Engine::Aggregation,
            aggregates: HashMap::from([
                ("a".to_string(), Aggregate::Sum),
                (
                    "s".to_string(),
                    Aggregate::ListAgg {
                        delimiter: ";".to_string(),
                    },
                ),
                ("b".to_string(), Aggregate::BoolAnd),
            ]),
            ..MergeSpec::plain()
        };
        let line = merged(
            &spec,
            &[
                (1, Some(i64::MAX), Some("a"), Some(true)),
                (1, None, Some(" "), None),
                (1, Some(2), Some("b"), Some(false)),
            ],
        );
        assert_eq!(line, format!("| 1 | {} | a;b | false |", i64::MIN + 1));
        // One version is kept as it is, blank string included.
        let line = merged(&spec, &[(1, Some(5), Some(" "), None)]);
        assert_eq!(line, "| 1 | 5 |   |   |");
    }

    #[test]
    fn the_largest_sequence_wins_and_ties_go_to_the_later_write() {
        let spec = MergeSpec {
            sequence_fields: vec!["a".to_string()],
            ..MergeSpec::plain()
        };
        let rows = [
            (1, Some(5), Some("p"), None),
            (1, Some(3), Some("q"), None),
            (1, Some(5), Some("r"), None),
            (1, None, Some("s"), None),
        ];
        assert_eq!(merged(&spec, &rows), "| 1 | 5 | r |   |");
        let spec = MergeSpec {
            sequence_descending: true,
            ..spec
        };
        assert_eq!(merged(&spec, &rows), "| 1 | 3 | q |   |");
    }
}
