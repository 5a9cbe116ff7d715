//! One forwarding of paimon's `Catalog` trait, for both of the crate's
//! decorators: the catalog whose tables commit safely ([`super::catalog`])
//! and the lake-stream catalog ([`crate::LakeStreamCatalog`]).
//!
//! A decorator implements [`Decorator`]: it names the catalog it wraps and
//! overrides the methods it changes. Every other method forwards to the
//! wrapped catalog, those paimon gives a default included (`as_any`, tags,
//! views, functions, partitions): a method left to paimon's default would
//! silently turn that part of the wrapped catalog off. [`impl_catalog!`]
//! then implements `Catalog` for the decorator, each method calling the
//! decorator's.
//!
//! Every method of the trait is listed once, in [`catalog_methods!`], which
//! both of those are made from. A test reads the trait in the paimon source
//! this crate builds with and fails when the list differs from it, so a
//! method added upstream cannot be left to its default unnoticed.

use std::any::Any;
use std::collections::HashMap;

use async_trait::async_trait;
use paimon::api::{GetTagResponse, PagedList};
use paimon::catalog::{Catalog, Database, Function, Identifier, LoadedTable, View, ViewSchema};
use paimon::spec::{Partition, PartitionStatistics, Schema, SchemaChange};
use paimon::table::Table;

/// The types in the trait's signatures, for [`impl_catalog!`] to name
/// wherever it is used.
#[doc(hidden)]
pub(crate) mod signature {
    pub(crate) use std::any::Any;
    pub(crate) use std::collections::HashMap;

    pub(crate) use paimon::api::{GetTagResponse, PagedList};
    pub(crate) use paimon::catalog::{
        Database, Function, Identifier, LoadedTable, View, ViewSchema,
    };
    pub(crate) use paimon::spec::{Partition, PartitionStatistics, Schema, SchemaChange};
    pub(crate) use paimon::table::Table;
}

/// Every method of paimon's `Catalog` trait but `as_any` (which is not
/// `async`), with its arguments and what its `paimon::Result` holds, handed
/// to the macro `$then` after the token tree `$context`.
macro_rules! catalog_methods {
    ($then:ident ! $context:tt) => {
        $crate::object_storage::forward::$then! { $context
            fn list_databases() -> Vec<String>;
            fn create_database(
                name: &str,
                ignore_if_exists: bool,
                properties: HashMap<String, String>
            ) -> ();
            fn get_database(name: &str) -> Database;
            fn drop_database(name: &str, ignore_if_not_exists: bool, cascade: bool) -> ();
            fn get_table(identifier: &Identifier) -> Table;
            fn load_table(identifier: &Identifier) -> LoadedTable;
            fn list_tables(database_name: &str) -> Vec<String>;
            fn create_table(
                identifier: &Identifier,
                creation: Schema,
                ignore_if_exists: bool
            ) -> ();
            fn drop_table(identifier: &Identifier, ignore_if_not_exists: bool) -> ();
            fn rename_table(
                from: &Identifier,
                to: &Identifier,
                ignore_if_not_exists: bool
            ) -> ();
            fn alter_table(
                identifier: &Identifier,
                changes: Vec<SchemaChange>,
                ignore_if_not_exists: bool
            ) -> ();
            fn create_tag(
                identifier: &Identifier,
                tag_name: &str,
                snapshot_id: Option<i64>,
                ignore_if_exists: bool
            ) -> ();
            fn create_tag_with_retention(
                identifier: &Identifier,
                tag_name: &str,
                snapshot_id: Option<i64>,
                time_retained: Option<&str>,
                ignore_if_exists: bool
            ) -> ();
            fn get_tag(identifier: &Identifier, tag_name: &str) -> GetTagResponse;
            fn delete_tag(
                identifier: &Identifier,
                tag_name: &str,
                ignore_if_not_exists: bool
            ) -> ();
            fn create_view(
                identifier: &Identifier,
                schema: ViewSchema,
                ignore_if_exists: bool
            ) -> ();
            fn drop_view(identifier: &Identifier, ignore_if_not_exists: bool) -> ();
            fn list_views(database_name: &str) -> Vec<String>;
            fn get_view(identifier: &Identifier) -> View;
            fn create_function(function: &Function, ignore_if_exists: bool) -> ();
            fn list_functions(database_name: &str) -> Vec<String>;
            fn get_function(identifier: &Identifier) -> Function;
            fn create_partitions(
                identifier: &Identifier,
                partition_specs: Vec<HashMap<String, String>>,
                ignore_if_exists: bool
            ) -> ();
            fn create_partitions_with_statistics(
                identifier: &Identifier,
                partition_specs: Vec<HashMap<String, String>>,
                ignore_if_exists: bool,
                statistics: Option<Vec<PartitionStatistics>>,
                replace_statistics: bool
            ) -> ();
            fn drop_partitions(
                identifier: &Identifier,
                partition_specs: Vec<HashMap<String, String>>
            ) -> ();
            fn list_partitions_by_names(
                identifier: &Identifier,
                partition_specs: Vec<HashMap<String, String>>
            ) -> Vec<Partition>;
            fn list_partitions(identifier: &Identifier) -> Vec<Partition>;
            fn list_partitions_paged(
                identifier: &Identifier,
                max_results: Option<u32>,
                page_token: Option<&str>
            ) -> PagedList<Partition>;
        }
    };
}
pub(crate) use catalog_methods;

/// Defines [`Decorator`] from [`catalog_methods!`].
macro_rules! decorator_trait {
    (() $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// A decorator of a paimon `Catalog`: the catalog it wraps, and the
        /// methods it changes. Each method forwards to the wrapped catalog
        /// unless the decorator overrides it; [`impl_catalog!`] makes the
        /// decorator a `Catalog` through these.
        ///
        /// An implementation names this trait by its path, without `use`:
        /// with both traits in scope, a call such as `self.get_table(..)`
        /// would be ambiguous. Inside the implementation it is anyway: a
        /// call to another method of the catalog is written
        /// `Catalog::get_table(self, ..)`.
        #[async_trait]
        pub(crate) trait Decorator: Send + Sync {
            /// The catalog this one wraps.
            fn wrapped(&self) -> &dyn Catalog;

            /// The wrapped catalog's: callers reach catalog-specific APIs
            /// (REST procedures) through it, as Java does through
            /// `rootCatalog`.
            fn as_any(&self) -> Option<&dyn Any> {
                self.wrapped().as_any()
            }

            $(
                #[doc = concat!(
                    "`Catalog::", stringify!($name), "`: the wrapped catalog's unless overridden."
                )]
                async fn $name(&self, $($arg: $ty),*) -> paimon::Result<$ret> {
                    self.wrapped().$name($($arg),*).await
                }
            )*
        }

        /// The methods [`catalog_methods!`] lists, `as_any` first.
        #[cfg(test)]
        const LISTED: &[&str] = &["as_any", $(stringify!($name)),*];
    };
}
pub(crate) use decorator_trait;

catalog_methods!(decorator_trait!());

/// `impl Catalog for $decorator`, from [`catalog_methods!`]: every method
/// calls the [`Decorator`]'s.
macro_rules! catalog_impl {
    (($decorator:ident) $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        const _: () = {
            use $crate::object_storage::forward::signature::{
                Any, Database, Function, GetTagResponse, HashMap, Identifier, LoadedTable,
                PagedList, Partition, PartitionStatistics, Schema, SchemaChange, Table, View,
                ViewSchema,
            };
            use $crate::object_storage::forward::Decorator;

            #[::async_trait::async_trait]
            impl ::paimon::catalog::Catalog for $decorator {
                fn as_any(&self) -> Option<&dyn Any> {
                    <$decorator as Decorator>::as_any(self)
                }

                $(
                    async fn $name(&self, $($arg: $ty),*) -> ::paimon::Result<$ret> {
                        <$decorator as Decorator>::$name(self, $($arg),*).await
                    }
                )*
            }
        };
    };
}
pub(crate) use catalog_impl;

/// Implements paimon's `Catalog` for a type that implements [`Decorator`]:
/// every method of the trait, each calling the decorator's.
macro_rules! impl_catalog {
    ($decorator:ident) => {
        $crate::object_storage::forward::catalog_methods!(catalog_impl!($decorator));
    };
}
pub(crate) use impl_catalog;

/// The tests' recording catalog, from [`catalog_methods!`].
#[cfg(test)]
macro_rules! recorder_impl {
    (() $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        #[async_trait]
        impl Catalog for Recorder {
            fn as_any(&self) -> Option<&dyn Any> {
                self.record("as_any");
                Some(self)
            }

            $(
                async fn $name(&self, $($arg: $ty),*) -> paimon::Result<$ret> {
                    $(let _ = $arg;)*
                    self.record(stringify!($name));
                    Err(paimon::Error::Unsupported {
                        message: format!("recorded {}", stringify!($name)),
                    })
                }
            )*
        }
    };
}
#[cfg(test)]
pub(crate) use recorder_impl;

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use paimon::spec::{DataType, IntType};

    use super::*;

    /// A catalog that records which of its methods are called, and answers
    /// each with an error naming it.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<&'static str>>,
    }

    impl Recorder {
        fn record(&self, method: &'static str) {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(method);
        }

        fn calls(&self) -> Vec<&'static str> {
            std::mem::take(&mut *self.calls.lock().unwrap_or_else(|e| e.into_inner()))
        }
    }

    catalog_methods!(recorder_impl!());

    /// A decorator that overrides nothing.
    struct Plain(Arc<Recorder>);

    #[async_trait]
    impl Decorator for Plain {
        fn wrapped(&self) -> &dyn Catalog {
            self.0.as_ref()
        }
    }

    impl_catalog!(Plain);

    /// A decorator that answers `get_table` and `create_tag` itself.
    struct Overriding(Arc<Recorder>);

    #[async_trait]
    impl Decorator for Overriding {
        fn wrapped(&self) -> &dyn Catalog {
            self.0.as_ref()
        }

        async fn get_table(&self, identifier: &Identifier) -> paimon::Result<Table> {
            Err(paimon::Error::Unsupported {
                message: format!("overridden get_table of {}", identifier.full_name()),
            })
        }

        async fn create_tag(
            &self,
            identifier: &Identifier,
            tag_name: &str,
            snapshot_id: Option<i64>,
            ignore_if_exists: bool,
        ) -> paimon::Result<()> {
            // As the lake-stream catalog does: through the catalog's own
            // `create_tag_with_retention`, which here forwards.
            Catalog::create_tag_with_retention(
                self,
                identifier,
                tag_name,
                snapshot_id,
                None,
                ignore_if_exists,
            )
            .await
        }
    }

    impl_catalog!(Overriding);

    /// What each call answered: the error's text.
    fn answer<T>(result: paimon::Result<T>) -> String {
        match result {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        }
    }

    /// Calls every method of `catalog` once, in the trait's order.
    async fn call_every_method(catalog: &dyn Catalog) -> Vec<String> {
        let id = Identifier::new("db", "t");
        let schema = Schema::builder()
            .column("id", DataType::Int(IntType::new()))
            .build()
            .expect("schema");
        let view = ViewSchema::new(
            Vec::new(),
            "SELECT 1".to_string(),
            HashMap::new(),
            None,
            HashMap::new(),
        );
        let function = Function::new(
            Identifier::new("db", "f"),
            None,
            None,
            true,
            HashMap::new(),
            None,
            HashMap::new(),
        );
        let specs = || vec![HashMap::from([("p".to_string(), "1".to_string())])];
        let mut answers = vec![format!("as_any: {}", catalog.as_any().is_some())];
        answers.push(answer(catalog.list_databases().await));
        answers.push(answer(
            catalog.create_database("db", true, HashMap::new()).await,
        ));
        answers.push(answer(catalog.get_database("db").await));
        answers.push(answer(catalog.drop_database("db", true, true).await));
        answers.push(answer(catalog.get_table(&id).await));
        answers.push(answer(catalog.load_table(&id).await));
        answers.push(answer(catalog.list_tables("db").await));
        answers.push(answer(catalog.create_table(&id, schema, true).await));
        answers.push(answer(catalog.drop_table(&id, true).await));
        answers.push(answer(
            catalog
                .rename_table(&id, &Identifier::new("db", "u"), true)
                .await,
        ));
        answers.push(answer(catalog.alter_table(&id, Vec::new(), true).await));
        answers.push(answer(catalog.create_tag(&id, "tag", Some(1), true).await));
        answers.push(answer(
            catalog
                .create_tag_with_retention(&id, "tag", Some(1), Some("1d"), true)
                .await,
        ));
        answers.push(answer(catalog.get_tag(&id, "tag").await));
        answers.push(answer(catalog.delete_tag(&id, "tag", true).await));
        answers.push(answer(catalog.create_view(&id, view, true).await));
        answers.push(answer(catalog.drop_view(&id, true).await));
        answers.push(answer(catalog.list_views("db").await));
        answers.push(answer(catalog.get_view(&id).await));
        answers.push(answer(catalog.create_function(&function, true).await));
        answers.push(answer(catalog.list_functions("db").await));
        answers.push(answer(catalog.get_function(&id).await));
        answers.push(answer(catalog.create_partitions(&id, specs(), true).await));
        answers.push(answer(
            catalog
                .create_partitions_with_statistics(&id, specs(), true, None, true)
                .await,
        ));
        answers.push(answer(catalog.drop_partitions(&id, specs()).await));
        answers.push(answer(catalog.list_partitions_by_names(&id, specs()).await));
        answers.push(answer(catalog.list_partitions(&id).await));
        answers.push(answer(
            catalog
                .list_partitions_paged(&id, Some(10), Some("page"))
                .await,
        ));
        answers
    }

    /// Through a decorator that overrides nothing, every method reaches the
    /// wrapped catalog as the same method, and its answer comes back; none
    /// is left to paimon's default (which would answer "not supported", or
    /// call another method: `load_table` calls `get_table`,
    /// `list_partitions_paged` calls `list_partitions`).
    #[tokio::test]
    async fn every_method_reaches_the_wrapped_catalog_as_itself() {
        let recorder = Arc::new(Recorder::default());
        let plain = Plain(Arc::clone(&recorder));
        let answers = call_every_method(&plain).await;
        assert_eq!(
            recorder.calls(),
            LISTED,
            "the methods the wrapped catalog saw"
        );
        assert_eq!(answers[0], "as_any: true");
        for (answer, method) in answers.iter().zip(LISTED).skip(1) {
            assert!(
                answer.contains(&format!("recorded {method}")),
                "{method} answered {answer:?}"
            );
        }
        assert!(
            (&plain as &dyn Catalog)
                .as_any()
                .and_then(|any| any.downcast_ref::<Recorder>())
                .is_some(),
            "as_any answers with the wrapped catalog"
        );
    }

    /// A method the decorator overrides is the decorator's; the others
    /// still forward, and a call from an override through the decorator's
    /// `Catalog` reaches the wrapped catalog.
    #[tokio::test]
    async fn an_override_replaces_the_forwarding() {
        let recorder = Arc::new(Recorder::default());
        let overriding = Overriding(Arc::clone(&recorder));
        let answers = call_every_method(&overriding).await;
        let mut expected: Vec<&str> = LISTED.to_vec();
        // `get_table` is answered by the decorator; `create_tag` goes out
        // as `create_tag_with_retention`.
        expected.retain(|method| *method != "get_table");
        let tag = expected
            .iter()
            .position(|method| *method == "create_tag")
            .expect("create_tag is listed");
        expected[tag] = "create_tag_with_retention";
        assert_eq!(recorder.calls(), expected);
        let get_table = LISTED
            .iter()
            .position(|method| *method == "get_table")
            .expect("get_table is listed");
        assert!(
            answers[get_table].contains("overridden get_table of db.t"),
            "{}",
            answers[get_table]
        );
    }

    /// The methods declared by the trait `header` opens in `source`: the
    /// names after `fn` at the trait's own level (not in a default body).
    /// Comments and string literals are skipped.
    fn trait_methods(source: &str, header: &str) -> Vec<String> {
        let start = source
            .find(header)
            .unwrap_or_else(|| panic!("'{header}' is not in the source"));
        let mut methods = Vec::new();
        let mut depth = 0usize;
        let mut word = String::new();
        let mut after_fn = false;
        let mut chars = source[start..].chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                if depth == 1 && after_fn {
                    methods.push(std::mem::take(&mut word));
                }
                after_fn = depth == 1 && word == "fn";
                word.clear();
            }
            match c {
                '/' if chars.peek() == Some(&'/') => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                '"' => {
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => {
                                chars.next();
                            }
                            '"' => break,
                            _ => {}
                        }
                    }
                }
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        methods
    }

    /// The text of `file` in the source of the paimon crate this crate is
    /// built with, wherever cargo keeps it (registry, vendored, git).
    fn paimon_source(file: &str) -> String {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
        let version = std::process::Command::new(&rustc)
            .arg("-vV")
            .output()
            .unwrap_or_else(|e| panic!("{rustc} -vV: {e}"));
        let version = String::from_utf8_lossy(&version.stdout);
        let host = version
            .lines()
            .find_map(|line| line.strip_prefix("host: "))
            .unwrap_or_else(|| panic!("no host in `{rustc} -vV`: {version}"));
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let output = std::process::Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--filter-platform", host, "--manifest-path", manifest])
            .output()
            .expect("cargo metadata");
        assert!(
            output.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
        let packages = metadata["packages"].as_array().expect("packages");
        let paimon: Vec<&str> = packages
            .iter()
            .filter(|package| package["name"] == "paimon")
            .filter_map(|package| package["manifest_path"].as_str())
            .collect();
        assert_eq!(paimon.len(), 1, "one paimon crate: {paimon:?}");
        let root = std::path::Path::new(paimon[0])
            .parent()
            .expect("the manifest's directory");
        std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", root.join(file).display()))
    }

    #[test]
    fn trait_methods_reads_the_declarations_only() {
        let source = r#"
            pub trait Catalog: Send + Sync {
                // fn commented();
                /// Docs that say fn not_this() { }
                fn as_any(&self) -> Option<&dyn Any> { None }
                async fn listed(&self) -> Result<()>;
                async fn defaulted(&self) -> Result<()> {
                    let f = |x: u8| { x };
                    Err(Error::Unsupported { message: "fn in a string {".to_string() })
                }
            }
            fn after_the_trait() {}
        "#;
        assert_eq!(
            trait_methods(source, "pub trait Catalog"),
            ["as_any", "listed", "defaulted"]
        );
    }

    /// The list every forwarding is made from holds exactly the methods of
    /// the `Catalog` trait of the paimon this crate builds with: a method
    /// paimon adds (with a default, so the compiler says nothing) fails
    /// here until it is listed, and with it forwarded by both decorators.
    #[test]
    fn the_list_is_the_trait_in_paimons_source() {
        let source = paimon_source("src/catalog/mod.rs");
        let mut declared = trait_methods(&source, "pub trait Catalog");
        let mut listed: Vec<String> = LISTED.iter().map(|m| m.to_string()).collect();
        declared.sort();
        listed.sort();
        let missing: Vec<&String> = declared.iter().filter(|m| !listed.contains(m)).collect();
        let extra: Vec<&String> = listed.iter().filter(|m| !declared.contains(m)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "paimon's Catalog declares methods catalog_methods! does not list: {missing:?}; \
             and lists methods paimon's Catalog does not declare: {extra:?}"
        );
    }
}
