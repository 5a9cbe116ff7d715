//! How the shell and scripts show an error: short, saying what the
//! statement did; DataFusion's whole text (plans and all) only on request.

use datafusion::error::DataFusionError;

/// The longest message shown in full by default; a longer one (DataFusion
/// prints whole plans into some) is cut, and says how to see all of it.
/// This crate's own messages end with what to do, and stay well under it
/// (the longest template is about 750 characters before its names and paths).
pub const SHORT_LIMIT: usize = 1500;

/// The message of `error` for a person: in full when `verbose`, otherwise
/// DataFusion's "pipeline breaking" refusal as a sentence about the
/// statement, and any other message cut at [`SHORT_LIMIT`] characters.
pub fn describe(error: &DataFusionError, verbose: bool) -> String {
    let full = error.to_string();
    if verbose {
        return full;
    }
    if let Some(operator) = pipeline_breaker(&full) {
        return format!(
            "the statement reads an unbounded input (a streaming t$rt read, with \
             lakestream.scan_mode = 'streaming') into {operator}, which needs all of its input \
             (DataFusion: cannot execute pipeline breaking queries). Read it in batch mode \
             (SET lakestream.scan_mode = 'batch'), or use only filters, projections and LIMIT \
             on a streaming read. --verbose shows DataFusion's whole message"
        );
    }
    shorten(&full)
}

/// The operator DataFusion named in its "pipeline breaking" refusal: `an
/// aggregation (AggregateExec)`, `a sort (SortExec)`, ....
fn pipeline_breaker(message: &str) -> Option<String> {
    const MARKER: &str = "pipeline breaking queries, operator: ";
    let at = message.find(MARKER)? + MARKER.len();
    let name: String = message
        .get(at..)?
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let what = match name.as_str() {
        "AggregateExec" => "an aggregation (count, GROUP BY, ...)",
        "SortExec" | "SortPreservingMergeExec" => "a sort (ORDER BY)",
        "HashJoinExec" | "NestedLoopJoinExec" | "CrossJoinExec" | "SortMergeJoinExec" => {
            "a join that builds on it"
        }
        "WindowAggExec" | "BoundedWindowAggExec" => "a window function",
        _ => "an operator",
    };
    Some(if name.is_empty() {
        what.to_string()
    } else {
        format!("{what} ({name})")
    })
}

fn shorten(full: &str) -> String {
    let Some((cut, _)) = full.char_indices().nth(SHORT_LIMIT) else {
        return full.to_string();
    };
    let rest = full[cut..].chars().count();
    format!(
        "{} … ({rest} more characters; --verbose shows them)",
        &full[..cut]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_breaking_says_what_the_statement_did_without_the_plan() {
        let plan = format!(
            "AggregateExec {{ mode: Partial, group_by: {} }}",
            "x".repeat(3000)
        );
        let error = DataFusionError::Context(
            "SanityCheckPlan".into(),
            Box::new(DataFusionError::Plan(format!(
                "Cannot execute pipeline breaking queries, operator: {plan}"
            ))),
        );
        let short = describe(&error, false);
        assert!(
            short.contains("aggregation (count, GROUP BY, ...) (AggregateExec)"),
            "{short}"
        );
        assert!(short.contains("lakestream.scan_mode = 'batch'"), "{short}");
        assert!(!short.contains("mode: Partial"), "{short}");
        assert!(short.len() < SHORT_LIMIT, "{short}");
        assert!(describe(&error, true).contains(&plan));
    }

    #[test]
    fn long_messages_are_cut_and_say_so() {
        let long = DataFusionError::Execution(format!("é{}", "y".repeat(2000)));
        let short = describe(&long, false);
        let full = long.to_string();
        let kept: String = full.chars().take(SHORT_LIMIT).collect();
        let rest = full.chars().count() - SHORT_LIMIT;
        assert_eq!(
            short,
            format!("{kept} … ({rest} more characters; --verbose shows them)")
        );
        assert_eq!(describe(&long, true), long.to_string());
        let brief = DataFusionError::Plan("table 'x' not found".into());
        assert_eq!(describe(&brief, false), brief.to_string());
    }
}
