//! Keeps the docs true: the SQL they show runs.
//!
//! For each markdown file under `docs/` (recursively) and `README.md`, every
//! fenced code block marked ```` ```sql ```` runs, the blocks of a file in
//! order, statement by statement (split and run as `lakestream-cli` runs a
//! script: [`LakeStreamContext::execute`]), in one fresh context per file: a temporary
//! filesystem warehouse registered as catalog `paimon`, naming the `local`
//! store with background tiering off (`local.tier-interval` = `off`), so rows
//! move into Paimon only where the docs tier them. `examples/quickstart.sql`
//! runs the same way.
//!
//! Conventions for writers of docs:
//! - A statement that is meant to fail is preceded, inside its block, by a
//!   comment line `-- error: <text>`; the statement must then fail with an
//!   error whose message contains `<text>`.
//! - A block that cannot run here (placeholder paths, shell commands, output)
//!   uses another fence: ```` ```text ````, ```` ```sh ````.
//! - A statement shows what it returns with a comment after its `;`, on the
//!   same line: `-- result: 1 a, 2 b` (rows separated by `, `, a row's
//!   values by spaces, `NULL` for null), optionally followed by ` -- ` and a
//!   note. The rows it returns must be those, in any order.
//! - Streaming reads must end on their own (`LIMIT`); every statement has
//!   [`STATEMENT_TIMEOUT`] to finish.
//! - A file whose first line is `<!-- docs-test: <store> -->` is about another
//!   store than `local`: it is skipped here and run by that store's tests
//!   against a real store (`docs/fluss.md` by `tests/it/fluss.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use paimon_lakestream::LakeStreamContext;

/// The shell's own script splitter: the docs' SQL is cut into statements
/// exactly as `lakestream-cli` cuts a script. The shell is a program, not
/// part of the library, so its file is compiled in here too; this test uses
/// only [`script::split_statements`].
#[allow(dead_code)]
#[path = "../../src/bin/lakestream-cli/script.rs"]
mod script;

use script::split_statements;

/// No statement of the docs may hang the test run.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The marker of a statement that must fail.
const ERROR_MARKER: &str = "-- error:";

/// The marker of the rows a statement returns, after its `;`.
const RESULT_MARKER: &str = "-- result:";

/// The store a markdown file's SQL is for, from its first line
/// `<!-- docs-test: <store> -->`; `local` when it has none.
pub(crate) fn doc_store(markdown: &str) -> &str {
    markdown
        .lines()
        .next()
        .and_then(|line| line.trim().strip_prefix("<!-- docs-test:"))
        .and_then(|rest| rest.strip_suffix("-->"))
        .map_or("local", str::trim)
}

/// A fenced ```` ```sql ```` block: where it starts and what it holds.
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    text: String,
}

/// The ```` ```sql ```` blocks of a markdown text, in order.
fn sql_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let is_sql = info.split_whitespace().next() == Some("sql");
                    open = Some((index + 1, is_sql, String::new()));
                }
            }
            Some((start, is_sql, text)) => {
                if trimmed.starts_with("```") {
                    if *is_sql {
                        blocks.push(Block {
                            line: *start,
                            text: std::mem::take(text),
                        });
                    }
                    open = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is not closed");
    blocks
}

/// The text a statement must fail with, from its `-- error:` line.
fn expected_error(statement: &str) -> Option<String> {
    statement
        .lines()
        .map(str::trim)
        .take_while(|line| line.is_empty() || line.starts_with("--"))
        .find_map(|line| line.strip_prefix(ERROR_MARKER))
        .map(|text| text.trim().to_string())
}

/// A fresh context on a temporary warehouse, as the module doc describes.
async fn context(warehouse: &Path) -> LakeStreamContext {
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        ("local.tier-interval".to_string(), "off".to_string()),
    ]);
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register catalog");
    ctx
}

/// The rows a statement is shown to return: from the rest of the line
/// after its text, `; -- result: <rows>[ -- note]`; sorted.
fn shown_result(rest_of_line: &str) -> Option<Vec<String>> {
    let shown = rest_of_line
        .trim_start()
        .strip_prefix(';')?
        .trim()
        .strip_prefix(RESULT_MARKER)?;
    let rows = shown.split(" -- ").next().unwrap_or_default().trim();
    let mut rows: Vec<String> = rows.split(", ").map(|r| r.trim().to_string()).collect();
    rows.sort();
    Some(rows)
}

async fn execute(ctx: &mut LakeStreamContext, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let run = async { ctx.execute(sql).await?.collect().await };
    match tokio::time::timeout(STATEMENT_TIMEOUT, run).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("did not finish within {STATEMENT_TIMEOUT:?}")),
    }
}

/// Runs `blocks` of `file` in order in `ctx`; panics naming the file, the
/// block and the statement that did not do what the docs say.
async fn run_blocks(ctx: &mut LakeStreamContext, file: &str, blocks: &[Block]) {
    for block in blocks {
        // Where the last statement ended: each statement is found in the
        // block after it, and what follows it on its line is read.
        let mut cursor = 0;
        for statement in split_statements(&block.text) {
            let shown = block.text[cursor..].find(&statement).and_then(|at| {
                let end = cursor + at + statement.len();
                cursor = end;
                shown_result(block.text[end..].lines().next().unwrap_or_default())
            });
            let result = execute(ctx, &statement).await;
            let place = || {
                format!(
                    "{file}, block at line {}, statement:\n{}\n",
                    block.line,
                    statement.trim()
                )
            };
            match (expected_error(&statement), result) {
                (None, Ok(batches)) => {
                    if let Some(shown) = shown {
                        let got = crate::independent::render_with(&batches, " ");
                        assert_eq!(
                            got,
                            shown,
                            "{}returned other rows than the docs show",
                            place()
                        );
                    }
                }
                (None, Err(e)) => panic!("{}failed: {e}", place()),
                (Some(expected), Ok(_)) => {
                    panic!(
                        "{}succeeded, but is marked to fail with '{expected}'",
                        place()
                    )
                }
                (Some(expected), Err(e)) => assert!(
                    e.contains(&expected),
                    "{}failed with:\n{e}\nbut is marked to fail with '{expected}'",
                    place()
                ),
            }
        }
    }
}

/// Runs `blocks` in a fresh context on a temporary warehouse.
async fn run_blocks_locally(file: &str, blocks: &[Block]) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).expect("warehouse directory");
    let mut ctx = context(&warehouse).await;
    run_blocks(&mut ctx, file, blocks).await;
}

/// The text of a markdown file of the repository and its name for messages.
fn read_markdown(path: &Path) -> (String, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let name = path
        .strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (name, text)
}

/// Runs the SQL of a `local` markdown file; other stores' files are skipped.
/// Returns how many blocks ran.
async fn run_markdown(path: &Path) -> usize {
    let (name, text) = read_markdown(path);
    if doc_store(&text) != "local" {
        return 0;
    }
    let blocks = sql_blocks(&text);
    run_blocks_locally(&name, &blocks).await;
    blocks.len()
}

/// Runs the SQL of the markdown file `path` (relative to the repository) in
/// `ctx`, a context whose catalog `paimon` names the store the file is for.
/// Returns how many blocks ran.
#[cfg_attr(not(feature = "fluss"), allow(dead_code))]
pub(crate) async fn run_markdown_in(ctx: &mut LakeStreamContext, path: &str) -> usize {
    let (name, text) = read_markdown(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path));
    let blocks = sql_blocks(&text);
    run_blocks(ctx, &name, &blocks).await;
    blocks.len()
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_blocks_of_the_docs_run() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The README's blocks too (it has none today: its quickstart is
    // `examples/quickstart.sql`, run below).
    let mut files = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut files);
    let mut blocks = 0;
    for file in &files {
        blocks += run_markdown(file).await;
    }
    assert!(blocks > 0, "no ```sql blocks found under docs/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_runs() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.sql");
    let text = std::fs::read_to_string(&path).expect("examples/quickstart.sql");
    run_blocks_locally("examples/quickstart.sql", &[Block { line: 1, text }]).await;
}

#[test]
fn blocks_and_markers_are_found() {
    let markdown = "text\n```sql\nSELECT 1;\n-- error: not found\nSELECT * FROM x;\n```\n\
                    ```text\nSELECT broken\n```\n  ```sql\n  SELECT 2\n  ```\n";
    let blocks = sql_blocks(markdown);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].line, 2);
    assert_eq!(blocks[1].line, 10);
    let statements = split_statements(&blocks[0].text);
    assert_eq!(expected_error(&statements[0]), None);
    assert_eq!(expected_error(&statements[1]).as_deref(), Some("not found"));
    // A marker after the statement's first line is not a marker.
    assert_eq!(expected_error("SELECT 1\n-- error: x"), None);
    assert_eq!(doc_store("# Title\n<!-- docs-test: fluss -->"), "local");
    assert_eq!(doc_store("<!-- docs-test: fluss -->\n# Title"), "fluss");
    assert_eq!(doc_store(""), "local");
    assert_eq!(
        shown_result("; -- result: 2 b, 1 a -- a note").unwrap(),
        ["1 a", "2 b"]
    );
    assert_eq!(shown_result(";-- result: 0").unwrap(), ["0"]);
    assert_eq!(shown_result("; -- two rows"), None);
    assert_eq!(shown_result(" -- result: 0"), None);
}

/// A shown result that is not what the statement returns fails the docs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "returned other rows than the docs show")]
async fn a_wrong_shown_result_fails() {
    let text = "SELECT 1 AS a, 'x' AS b;   -- result: 1 y -- not what it returns\n".to_string();
    run_blocks_locally("example.md", &[Block { line: 1, text }]).await;
}

/// Shown results are compared, whatever the statement before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shown_results_are_compared() {
    let text = "SELECT 1 AS a, 'x' AS b;   -- result: 1 x\n\
                SELECT 1;\n\
                SELECT * FROM (VALUES (2), (1)) AS v(n);   -- result: 1, 2 -- any order\n"
        .to_string();
    run_blocks_locally("example.md", &[Block { line: 1, text }]).await;
}
