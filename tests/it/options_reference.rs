//! Keeps `docs/options.md` complete and true: every option key the code
//! accepts is listed there, and every key a table row there names is one the
//! code accepts.
//!
//! The keys come from the code itself, not from a copy here:
//! - lake-stream catalog options, lake-stream table options, and the `local`
//!   and `fluss` stores' options: from the error each refuses an unknown key
//!   with, which lists the known ones;
//! - S3 options (which ignore unknown keys) and session settings (whose
//!   refusal names no list): from the lists in the source that accept them,
//!   each key then confirmed by what the code does with it.
//!
//! A section of `docs/options.md` is compared with one family: the keys in
//! the first cell of its table rows (written in backticks) whose prefix is
//! the family's. Paimon's own options (`warehouse`, ...) are not checked.
//! Where a default can be given back to the code, the test also checks that
//! giving it changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use paimon_lakestream::object_storage::S3Options;
use paimon_lakestream::options::{check_table_option, CatalogStoreOptions};
use paimon_lakestream::store::local::{LocalOptions, LocalStoreFactory};
use paimon_lakestream::store::{StoreContext, StoreFactory};
use paimon_lakestream::LakeStreamContext;

/// A key no family knows.
const UNKNOWN: &str = "no-such-option";

/// The page.
fn page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/options.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One documented key: the `## ` section it is under, and its default cell.
#[derive(Debug)]
struct Documented {
    section: String,
    default: String,
}

/// The keys in the first cell of every table row of `markdown`, with their
/// section and the row's second cell (backticks removed).
fn documented(markdown: &str) -> BTreeMap<String, Documented> {
    let mut keys = BTreeMap::new();
    let mut section = String::new();
    for line in markdown.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_string();
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(first), Some(second)) = (cells.first(), cells.get(1)) else {
            continue;
        };
        for key in first.split('`').skip(1).step_by(2) {
            let previous = keys.insert(
                key.to_string(),
                Documented {
                    section: section.clone(),
                    default: second.trim_matches('`').to_string(),
                },
            );
            assert!(previous.is_none(), "docs/options.md lists '{key}' twice");
        }
    }
    keys
}

/// The documented keys under `section` that start with `prefix`.
fn in_section(
    docs: &BTreeMap<String, Documented>,
    section: &str,
    prefix: &str,
) -> BTreeSet<String> {
    let keys: BTreeSet<String> = docs
        .iter()
        .filter(|(key, doc)| doc.section == section && key.starts_with(prefix))
        .map(|(key, _)| key.clone())
        .collect();
    assert!(
        !keys.is_empty(),
        "docs/options.md has no '{prefix}' keys under '## {section}'"
    );
    keys
}

/// Fails naming what is missing from the docs and what they name in vain.
fn same(family: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) {
    let missing: Vec<&String> = code.difference(docs).collect();
    let unknown: Vec<&String> = docs.difference(code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{family}: docs/options.md lacks {missing:?} and names {unknown:?}, which the code does \
         not accept (the code's keys: {code:?})"
    );
}

/// The comma-separated list in `message` after `after`, up to `until` (or
/// the end), each item's first word.
fn listed(message: &str, after: &str, until: Option<&str>) -> BTreeSet<String> {
    let start = message
        .find(after)
        .unwrap_or_else(|| panic!("'{after}' is not in the error: {message}"))
        + after.len();
    let rest = &message[start..];
    let list = match until.and_then(|end| rest.find(end)) {
        Some(end) => &rest[..end],
        None => rest,
    };
    list.split(", ")
        .filter_map(|item| item.split_whitespace().next())
        .map(|item| item.trim_end_matches(['.', ',']).to_string())
        .collect()
}

/// The source files of the crate, each with its text.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source file");
                out.push((path.display().to_string(), text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out
}

/// The one source file holding `marker`, and where.
fn source_with(marker: &str) -> (String, usize) {
    let found: Vec<(String, usize)> = sources()
        .into_iter()
        .filter_map(|(_, text)| text.find(marker).map(|at| (text, at)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one source file must hold '{marker}' (update this test where the code moved)"
    );
    found.into_iter().next().expect("one file")
}

/// The string literals (`"..."`) of `text`.
fn literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn lakestream_catalog_options_are_all_documented() {
    let docs = documented(&page());
    let err = CatalogStoreOptions::from_catalog_options(&HashMap::from([(
        format!("lakestream.{UNKNOWN}"),
        "x".to_string(),
    )]))
    .expect_err("an unknown lakestream.* catalog option is refused")
    .to_string();
    let code = listed(&err, "options are: ", Some(". "));
    same(
        "catalog options lakestream.*",
        &code,
        &in_section(&docs, "Catalog options: lake-stream", "lakestream."),
    );
    // The documented defaults are the defaults.
    let given: HashMap<String, String> = code
        .iter()
        .filter(|key| key.as_str() != "lakestream.store")
        .map(|key| (key.clone(), docs[key].default.clone()))
        .collect();
    assert_eq!(
        CatalogStoreOptions::from_catalog_options(&given).expect("the documented defaults"),
        CatalogStoreOptions::from_catalog_options(&HashMap::new()).expect("no options"),
        "docs/options.md gives defaults {given:?}"
    );
}

#[test]
fn lakestream_table_options_are_all_documented() {
    let docs = documented(&page());
    let err = check_table_option("default.t", &format!("lakestream.{UNKNOWN}"), "x")
        .expect_err("an unknown lakestream.* table option is refused")
        .to_string();
    let code = listed(&err, "the known ones are: ", None);
    same(
        "table options lakestream.*",
        &code,
        &in_section(&docs, "Table options", "lakestream."),
    );
    let maintenance = &docs["lakestream.maintenance"].default;
    check_table_option("default.t", "lakestream.maintenance", maintenance)
        .expect("the documented default of lakestream.maintenance");
}

/// A store context for `options` on a catalog of a fresh warehouse.
async fn store_context(dir: &Path, options: &[(&str, &str)]) -> StoreContext {
    let warehouse = dir.display().to_string();
    let catalog_options = HashMap::from([("warehouse".to_string(), warehouse)]);
    let catalog =
        paimon::CatalogFactory::create(paimon::Options::from_map(catalog_options.clone()))
            .await
            .expect("paimon catalog");
    StoreContext {
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        catalog_options,
        catalog,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_options_are_all_documented() {
    let docs = documented(&page());
    let dir = tempfile::tempdir().expect("tempdir");
    let context = store_context(dir.path(), &[(UNKNOWN, "x")]).await;
    let Err(err) = LocalStoreFactory.create(context).await else {
        panic!("an unknown local.* option is accepted");
    };
    let err = err.to_string();
    let code = listed(&err, "it knows: ", None);
    same(
        "catalog options local.*",
        &code,
        &in_section(&docs, "Catalog options: the `local` store", "local."),
    );
    // The documented defaults are the defaults.
    let warehouse = "/w";
    let given: BTreeMap<String, String> = code
        .iter()
        .map(|key| {
            let default = docs[key].default.replace("<warehouse>", warehouse);
            (key["local.".len()..].to_string(), default)
        })
        .collect();
    assert_eq!(
        LocalOptions::from_options(&given, Some(warehouse)).expect("the documented defaults"),
        LocalOptions::from_options(&BTreeMap::new(), Some(warehouse)).expect("no options"),
        "docs/options.md gives defaults {given:?}"
    );
}

#[cfg(feature = "fluss")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fluss_store_options_are_all_documented() {
    use paimon_lakestream::store::fluss::FlussStoreFactory;

    let docs = documented(&page());
    let dir = tempfile::tempdir().expect("tempdir");
    let context = store_context(dir.path(), &[(UNKNOWN, "x")]).await;
    let Err(err) = FlussStoreFactory.create(context).await else {
        panic!("an unknown fluss.* option is accepted");
    };
    let err = err.to_string();
    let code: BTreeSet<String> = listed(&err, "are: ", None)
        .into_iter()
        .map(|key| format!("fluss.{key}"))
        .collect();
    same(
        "catalog options fluss.*",
        &code,
        &in_section(&docs, "Catalog options: the Fluss store", "fluss."),
    );
}

#[test]
fn s3_options_are_all_documented() {
    let docs = documented(&page());
    // `S3Options::from_options` ignores keys it does not know: its list is
    // the prefixes it strips and the names its match takes.
    let (text, at) = source_with("let canonical = match rest {");
    let start = text[..at]
        .rfind("fn from_options")
        .expect("the function that reads S3 options");
    let prefixes: Vec<String> = text[start..at]
        .split("strip_prefix(")
        .skip(1)
        .filter_map(|call| literals(call).into_iter().next())
        .collect();
    let arms = &text[at..];
    let arms = &arms[..arms.find("_ => continue").expect("the match's end")];
    let names: Vec<String> = arms
        .lines()
        .filter_map(|line| line.split_once("=>"))
        .flat_map(|(names, _)| literals(names))
        .collect();
    assert!(
        !prefixes.is_empty() && !names.is_empty(),
        "no S3 keys found in the source"
    );
    let code: BTreeSet<String> = prefixes
        .iter()
        .flat_map(|prefix| names.iter().map(move |name| format!("{prefix}{name}")))
        .collect();
    // Each is taken by the code (not ignored), as read from the source.
    for key in &code {
        let options = HashMap::from([(key.clone(), "true".to_string())]);
        assert_ne!(
            S3Options::from_options(&options),
            S3Options::default(),
            "S3 option '{key}' is ignored"
        );
    }
    let documented: BTreeSet<String> = docs
        .iter()
        .filter(|(key, doc)| {
            doc.section == "Catalog options: S3"
                && prefixes
                    .iter()
                    .any(|prefix| key.starts_with(prefix.as_str()))
        })
        .map(|(key, _)| key.clone())
        .collect();
    same("catalog options s3.*", &code, &documented);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_settings_are_all_documented() {
    let docs = documented(&page());
    // The settings `SET` takes: the list `is_read_setting` accepts, by the
    // names of the constants holding them.
    let (text, at) = source_with("fn is_read_setting(");
    let body = &text[at..];
    let list = &body[body.find('[').expect("the list of settings") + 1..];
    let list = &list[..list.find(']').expect("the list's end")];
    let code: BTreeSet<String> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let constant = format!("const {name}: &str = ");
            let at = text
                .find(&constant)
                .unwrap_or_else(|| panic!("constant {name} of the settings"));
            let value = literals(&text[at..]).into_iter().next().expect("its value");
            format!("lakestream.{value}")
        })
        .collect();
    same(
        "session settings",
        &code,
        &in_section(&docs, "Session settings", "lakestream."),
    );
    // `SET` takes each, with its documented default as the value.
    let mut ctx = LakeStreamContext::new();
    for key in &code {
        let sql = format!("SET {key} = '{}'", docs[key].default);
        ctx.execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}
