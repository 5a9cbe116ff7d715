//! The crate's layers, as the README's layout section draws them: every
//! `crate::` path in `src/` may name only a module of its own layer or a
//! lower one, modules and files form no import cycle, and no module outside
//! `src/store/` names a particular store.
//!
//! The table is read from the README, so the picture a newcomer reads and
//! the rule this test enforces are one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const START: &str = "<!-- layers -->";
const END: &str = "<!-- /layers -->";

/// The README's layer table: each row's backticked module names, lowest layer first.
fn layers(readme: &str) -> Vec<Vec<String>> {
    let start = readme.find(START).expect("README has a layer table");
    let end = readme[start..].find(END).expect("the layer table ends") + start;
    readme[start..end]
        .lines()
        .filter(|line| {
            line.starts_with('|') && !line.starts_with("|-") && !line.starts_with("| Layer")
        })
        .map(|line| {
            let modules = line.split('|').nth(2).unwrap_or_default();
            modules
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|name| name.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .filter(|row| !row.is_empty())
        .collect()
}

/// Rust source with comments, string and character literals blanked out, so
/// that only code is searched for paths.
fn code_of(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if let Some(len) = raw_string_len(rest, i == 0 || is_ident(bytes[i - 1])) {
            out.push_str("\"\"");
            i += len;
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i += (j + 1).min(rest.len());
        } else if let Some(len) = char_literal_len(rest) {
            out.push_str("' '");
            i += len;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `r"..."`, `r#"..."#`, `br"..."`: the literal's length, if one starts here.
fn raw_string_len(rest: &str, at_word_start: bool) -> Option<usize> {
    if !at_word_start {
        return None;
    }
    let after_b = rest.strip_prefix('b').unwrap_or(rest);
    let after_r = after_b.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body
        .find(&close)
        .map_or(body.len(), |end| end + close.len());
    Some(rest.len() - body.len() + end)
}

/// `'x'`, `'\n'`, `'\u{1F600}'`, but not a lifetime such as `'a`.
fn char_literal_len(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    if let Some(escaped) = body.strip_prefix('\\') {
        return escaped.find('\'').map(|end| end + 3);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..]
        .starts_with('\'')
        .then_some(c.len_utf8() + 2)
}

/// Every path that starts with `crate::`, with `use crate::{a, b::{c, d}}`
/// groups expanded: each as its segments after `crate`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    paths_after(code, "crate::")
        .into_iter()
        .map(|(_, path)| path)
        .collect()
}

/// Each path that starts with `root` (`crate::`, `super::`, `self::`), with
/// where it starts and its segments after `root`.
fn paths_after(code: &str, root: &str) -> Vec<(usize, Vec<String>)> {
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(root) {
        let start = from + at;
        from = start + root.len();
        if start > 0 && is_ident(code.as_bytes()[start - 1]) {
            continue;
        }
        let mut found = Vec::new();
        expand(&code[from..], Vec::new(), &mut found);
        paths.extend(found.into_iter().map(|path| (start, path)));
    }
    paths
}

/// How many inline `mod name { ... }` blocks enclose each byte of `code`.
fn inline_module_depths(code: &str) -> Vec<usize> {
    let mut depths = Vec::with_capacity(code.len());
    // For each open brace: whether it opened an inline module.
    let mut braces: Vec<bool> = Vec::new();
    let mut depth = 0;
    for (at, byte) in code.bytes().enumerate() {
        if byte == b'{' {
            let before = code[..at].trim_end();
            let name_start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let opens_module =
                before[..name_start].trim_end().ends_with("mod") && name_start < before.len();
            braces.push(opens_module);
            if opens_module {
                depth += 1;
            }
        } else if byte == b'}' && braces.pop() == Some(true) {
            depth -= 1;
        }
        depths.push(depth);
    }
    depths
}

/// The module path of a file under `src/`: `planner/history.rs` is
/// `planner::history`, `planner/mod.rs` is `planner`.
fn module_path(file: &str) -> Vec<String> {
    let mut path: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if path
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        path.pop();
    }
    path
}

/// Every `crate::`, `super::` and `self::` path of a file, made absolute
/// (segments after `crate`). A `super::` inside an inline module (such as a
/// file's `mod tests`) leads back into the same file and is left out.
fn absolute_paths(file: &str, code: &str) -> Vec<Vec<String>> {
    let mut paths = crate_paths(code);
    let depths = inline_module_depths(code);
    let here = module_path(file);
    for (at, path) in paths_after(code, "self::") {
        if depths.get(at).copied().unwrap_or(0) == 0 {
            paths.push(here.iter().cloned().chain(path).collect());
        }
    }
    for (at, path) in paths_after(code, "super::") {
        if at >= 5 && code[..at].ends_with("super::") {
            continue; // counted at the first `super::` of a chain
        }
        let ups = 1 + path
            .iter()
            .take_while(|segment| *segment == "super")
            .count();
        let inline = depths.get(at).copied().unwrap_or(0);
        if ups <= inline {
            continue;
        }
        let keep = here.len().saturating_sub(ups - inline);
        let rest = path.into_iter().skip_while(|segment| segment == "super");
        paths.push(here[..keep].iter().cloned().chain(rest).collect());
    }
    paths
}

/// Reads one use tree from the start of `text`, adding each path it names;
/// returns how much of `text` it read.
fn expand(text: &str, prefix: Vec<String>, paths: &mut Vec<Vec<String>>) -> usize {
    let skip_space = |at: usize| at + (text[at..].len() - text[at..].trim_start().len());
    let mut path = prefix;
    let mut i = skip_space(0);
    if text[i..].starts_with('{') {
        i += 1;
        loop {
            i = skip_space(i);
            if text[i..].is_empty() {
                return i;
            }
            if text[i..].starts_with('}') {
                return i + 1;
            }
            let read = expand(&text[i..], path.clone(), paths);
            // `*`, `self as x`: past what is not a path segment.
            i += read.max(text[i..].chars().next().map_or(0, char::len_utf8));
            i = skip_space(i);
            if text[i..].starts_with(',') {
                i += 1;
            }
        }
    }
    loop {
        let len = text[i..].bytes().take_while(|b| is_ident(*b)).count();
        if len == 0 {
            if !path.is_empty() {
                paths.push(path);
            }
            return i;
        }
        path.push(text[i..i + len].to_string());
        i += len;
        if !text[i..].starts_with("::") {
            paths.push(path);
            return i;
        }
        i += 2;
        if text[i..].starts_with('{') {
            return i + expand(&text[i..], path, paths);
        }
    }
}

struct Source {
    /// Path under `src/`, with `/` separators.
    file: String,
    code: String,
}

impl Source {
    fn new(file: &str, text: &str) -> Self {
        Self {
            file: file.to_string(),
            code: without_test_support(&code_of(text)),
        }
    }
}

/// `code` with each `crate::testing::` path inside a `#[cfg(test)]` module
/// blanked out: a unit test may use the crate's test support (the faulty
/// object store), which sits above every layer it tests.
fn without_test_support(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at + "#[cfg(test)]".len();
        from = start;
        let rest = code[start..].trim_start();
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub "))
            .unwrap_or(rest);
        if !rest.starts_with("mod ") {
            continue;
        }
        let Some(open) = code[start..].find('{').map(|i| start + i) else {
            break;
        };
        let mut depth = 0;
        let mut end = code.len();
        for (i, byte) in code.bytes().enumerate().skip(open) {
            match byte {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let blank = " ".repeat("crate::testing::".len());
        out.replace_range(
            open..end,
            &code[open..end].replace("crate::testing::", &blank),
        );
        from = end;
    }
    out
}

fn sources(dir: &Path, under: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|entry| entry.expect("read src/").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, under, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let file = path
                .strip_prefix(under)
                .expect("under src/")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("read a source file");
            out.push(Source::new(&file, &text));
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for the crate
/// root and the binaries).
fn module_of(file: &str) -> Option<&str> {
    if file == "lib.rs" || file.starts_with("bin/") {
        return None;
    }
    let first = file.split('/').next().unwrap_or(file);
    Some(first.strip_suffix(".rs").unwrap_or(first))
}

/// The file a `crate::` path leads to: the longest prefix of it that is a
/// file or a directory's `mod.rs`.
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().find_map(|len| {
        let joined = path[..len].join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .find(|candidate| files.contains(candidate))
    })
}

/// Whether `file` is the file of a module that encloses `of`
/// (`planner/mod.rs` or `planner.rs` for `planner/history.rs`): a file may
/// use what the modules around it define, as `use super::*` does, without
/// that counting towards a cycle.
fn is_ancestor(file: &str, of: &str) -> bool {
    let module = file
        .strip_suffix("/mod.rs")
        .or_else(|| file.strip_suffix(".rs"))
        .unwrap_or(file);
    of.starts_with(&format!("{module}/"))
}

/// The nodes of `graph` that lie on a cycle, each cycle once, as a path.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's strongly connected components.
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(edges) = state.graph.get(node) {
            for to in edges {
                if !state.index.contains_key(to.as_str()) {
                    visit(state, to);
                    let low = state.low[to.as_str()].min(state.low[node]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(to.as_str()) {
                    let low = state.index[to.as_str()].min(state.low[node]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

struct Crate {
    layers: Vec<Vec<String>>,
    sources: Vec<Source>,
}

fn this_crate() -> Crate {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let mut found = Vec::new();
    sources(&root.join("src"), &root.join("src"), &mut found);
    Crate {
        layers: layers(&readme),
        sources: found,
    }
}

/// Which rule each `crate::` path breaks, as lines naming the file and the path.
fn broken_rules(krate: &Crate) -> Vec<String> {
    let layer_of: BTreeMap<&str, usize> = krate
        .layers
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |m| (m.as_str(), layer)))
        .collect();
    let files: BTreeSet<String> = krate.sources.iter().map(|s| s.file.clone()).collect();
    let mut broken = Vec::new();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut file_graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in &krate.sources {
        let Some(module) = module_of(&source.file) else {
            continue;
        };
        let Some(&layer) = layer_of.get(module) else {
            broken.push(format!(
                "src/{}: module `{module}` is in no row of the README's layer table",
                source.file
            ));
            continue;
        };
        for path in absolute_paths(&source.file, &source.code) {
            let Some(target) = path.first().map(String::as_str) else {
                continue;
            };
            if path.len() >= 2
                && target == "store"
                && (path[1] == "local" || path[1] == "fluss")
                && module != "store"
            {
                broken.push(format!(
                    "src/{}: names a particular store: crate::{}",
                    source.file,
                    path.join("::")
                ));
            }
            if let Some(to) = file_of(&path, &files) {
                if to != source.file && !is_ancestor(&to, &source.file) {
                    file_graph
                        .entry(source.file.clone())
                        .or_default()
                        .insert(to);
                }
            }
            if target == module {
                continue;
            }
            let Some(&to_layer) = layer_of.get(target) else {
                continue;
            };
            modules
                .entry(module.to_string())
                .or_default()
                .insert(target.to_string());
            if to_layer > layer {
                broken.push(format!(
                    "src/{}: `{module}` (layer {}) imports the higher layer {}: crate::{}",
                    source.file,
                    layer + 1,
                    to_layer + 1,
                    path.join("::")
                ));
            }
        }
    }
    for cycle in cycles(&modules) {
        broken.push(format!("modules import each other in a cycle: {cycle:?}"));
    }
    for cycle in cycles(&file_graph) {
        broken.push(format!("files import each other in a cycle: {cycle:?}"));
    }
    broken.sort();
    broken.dedup();
    broken
}

#[test]
fn no_import_runs_up_the_layers_or_in_a_cycle() {
    let krate = this_crate();
    assert!(
        krate.layers.len() >= 5,
        "the README's layer table reads as {:?}",
        krate.layers
    );
    let broken = broken_rules(&krate);
    assert!(
        broken.is_empty(),
        "{} imports break the README's layers:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The checker itself: each rule fails on a crate that breaks it.
#[test]
fn the_layer_check_finds_what_it_guards() {
    let source = Source::new;
    let layers = vec![
        vec!["error".to_string()],
        vec!["store".to_string()],
        vec!["planner".to_string(), "table".to_string()],
        vec!["testing".to_string()],
    ];
    let krate =
        Crate {
            layers: layers.clone(),
            sources: vec![
            source("error.rs", "use crate::{store::Store, error::Error};"),
            source(
                "planner/mod.rs",
                "// crate::extension in a comment\nlet s = \"crate::table\"; use crate::table::T;",
            ),
            source("table/mod.rs", "fn f() { crate::planner::g(); crate::store::local::x(); }"),
            source("store/mod.rs", "use crate::store::local::Root;"),
            source(
                "store/local.rs",
                "use crate::error::{self, Error};\n#[cfg(test)]\nmod tests { use crate::testing::Faulty; }",
            ),
            source("cli.rs", ""),
        ],
        };
    let broken = broken_rules(&krate);
    let expect = |needle: &str| {
        assert!(
            broken.iter().any(|line| line.contains(needle)),
            "expected a line with {needle:?} in {broken:#?}"
        )
    };
    expect("src/error.rs: `error` (layer 1) imports the higher layer 2: crate::store::Store");
    expect("src/table/mod.rs: names a particular store: crate::store::local::x");
    expect("modules import each other in a cycle: [\"planner\", \"table\"]");
    expect("files import each other in a cycle: [\"planner/mod.rs\", \"table/mod.rs\"]");
    expect("src/cli.rs: module `cli` is in no row");
    assert!(
        !broken.iter().any(|line| line.contains("extension")),
        "comments and strings are not code: {broken:#?}"
    );
    assert!(
        !broken.iter().any(|line| line.starts_with("src/store/")),
        "a store may name itself: {broken:#?}"
    );
    expect("modules import each other in a cycle: [\"error\", \"store\"]");
    assert_eq!(broken.len(), 7, "{broken:#?}");
}

#[test]
fn use_trees_and_literals_are_read_as_rust_reads_them() {
    let paths = crate_paths(&code_of(
        "use crate::{a::{b, c::D}, e};\nlet x = crate::f::g(1); let s = r#\"crate::h\"#; let c = '\"'; let l: &'static str = \"crate::i\"; crate::j::K;",
    ));
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(names, ["a::b", "a::c::D", "e", "f::g", "j::K"]);
}
