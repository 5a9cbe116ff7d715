//! Warehouses and store roots on S3.
//!
//! One set of options configures everything that touches a bucket: Paimon's
//! own (`s3.endpoint`, `s3.access-key`, `s3.secret-key`, `s3.region`,
//! `s3.path-style-access`, `s3.session.token`, and the `fs.s3a.*` and
//! `s3a.*` spellings Java Paimon accepts), read here once into
//! [`S3Options`]. They build Paimon's file IO for the catalog's tables
//! (`commit`) and the `local` store's object store. Without keys, the AWS
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, ...) and credential chain
//! apply.
//!
//! Keys never print: [`S3Options`] shows which options are set and never
//! their values, and [`is_secret`] names the option keys whose values are
//! hidden everywhere else (the shell's history, `SHOW CATALOGS`).
//!
//! On S3 nothing renames atomically, so commits are made safe by
//! conditional writes (`commit`); see `docs/object-storage.md`.

mod catalog;
#[cfg(feature = "s3")]
mod commit;
pub(crate) mod create;
mod ddl;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod disk_full;
pub(crate) mod durable;
pub(crate) mod forward;
mod guard;
pub(crate) mod lease;
mod local;
pub(crate) mod lock;
mod schema_lock;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use paimon::catalog::{Catalog, Identifier};
use paimon::spec::{SchemaChange, TableSchema};
use paimon::table::Table;

#[cfg(feature = "s3")]
use object_store::aws::{AmazonS3, AmazonS3Builder};
use url::Url;

/// The URL schemes that name S3 locations.
const SCHEMES: &[&str] = &["s3", "s3a"];

/// Whether `location` is on S3 (`s3://bucket/...`, `s3a://bucket/...`).
pub(crate) fn is_s3(location: &str) -> bool {
    SCHEMES.iter().any(|s| {
        location.len() > s.len() + 3
            && location[..s.len() + 3].eq_ignore_ascii_case(&format!("{s}://"))
    })
}

/// Whether `location` is on the local file system as paimon's file IO over
/// a file-system operator resolves it: an absolute path, or a `file:` URL of
/// one ([`local_path`]).
pub(crate) fn is_local(location: &str) -> bool {
    local_path(location).is_some()
}

/// The directory or file on local disk that `location` names: `/w`,
/// `file:/w` and `file:///w` all name `/w`. `None` for a relative path, a
/// location with another scheme, or a `file:` URL with a host. paimon
/// spells the scheme in lower case only, and so does this. The one reading
/// of a local location: every check of "is this on local disk, and where"
/// goes through it.
pub(crate) fn local_path(location: &str) -> Option<std::path::PathBuf> {
    without_file_scheme(location)
        .filter(|path| path.starts_with('/'))
        .map(std::path::PathBuf::from)
}

/// The file that `path`, relative to a file-system operator's root `/`,
/// names (the operators of [`local`] are rooted there).
pub(crate) fn absolute(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from("/").join(path.trim_start_matches('/'))
}

/// `location` without a `file:` scheme (`file:///w` and `file:/w` are `/w`,
/// `file:w` is `w`, a path is itself); `None` when it has another scheme
/// or a host.
pub(crate) fn without_file_scheme(location: &str) -> Option<&str> {
    if let Some(rest) = location.strip_prefix("file://") {
        return rest.starts_with('/').then_some(rest);
    }
    if let Some(rest) = location.strip_prefix("file:") {
        return (!rest.contains("://")).then_some(rest);
    }
    (!location.contains("://")).then_some(location)
}

/// Refuses a location given as option `key` whose URL carries credentials
/// (`s3://KEY:SECRET@bucket/path`): paimon's file IO does not read them, and
/// its errors would print the URL whole. The message shows the URL without
/// them.
pub(crate) fn refuse_credentials_in_url(key: &str, location: &str) -> crate::error::Result<()> {
    let Ok(mut url) = Url::parse(location) else {
        return Ok(());
    };
    if url.username().is_empty() && url.password().is_none() {
        return Ok(());
    }
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Err(crate::error::Error::InvalidOption {
        key: key.to_string(),
        reason: format!(
            "'{url}' is given with credentials in its URL, which are not read there and \
             would print: give them as the options 's3.access-key' and 's3.secret-key', or \
             through the AWS credential chain (environment, profile)"
        ),
    })
}

/// Whether `path` names a file that a commit must create, never replace:
/// a snapshot, a schema or a tag, of any branch. (paimon creates and
/// renames a tag only onto a free name: two processes creating one tag at
/// once would otherwise both be told it was made, over different
/// snapshots.)
pub(super) fn create_only(path: &str) -> bool {
    let Some((dir, name)) = path.trim_start_matches('/').rsplit_once('/') else {
        return false;
    };
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let last = dir.rsplit('/').next().unwrap_or(dir);
    (dir.ends_with("snapshot") && numbered("snapshot-"))
        || (dir.ends_with("schema") && numbered("schema-"))
        || (last == "tag" && name.strip_prefix("tag-").is_some_and(|t| !t.is_empty()))
}

/// Whether `path` names a metadata file of a table (of any branch) that a
/// reader must only ever see whole: a snapshot or schema
/// ([`create_only`]), a changelog (`changelog/changelog-N`), the hints
/// paimon rewrites (`LATEST`, `EARLIEST` in `snapshot/` and `changelog/`),
/// a tag (`tag/tag-*`), an expiry's fence (`tag/expiring-*`) or a consumer
/// (`consumer/consumer-*`). A file system
/// shows a file while it is written, so [`guard`] writes these aside and
/// publishes them complete. A temporary (`.NAME.*.tmp`, paimon's
/// `snapshot-N.tmp-*`, itself written aside) is none of them.
pub(super) fn published_whole(path: &str) -> bool {
    if create_only(path) {
        return true;
    }
    let Some((dir, name)) = path.trim_start_matches('/').rsplit_once('/') else {
        return false;
    };
    let dir = dir.rsplit('/').next().unwrap_or(dir);
    let named = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty())
    };
    match dir {
        "snapshot" => matches!(name, "LATEST" | "EARLIEST"),
        "changelog" => {
            matches!(name, "LATEST" | "EARLIEST")
                || name
                    .strip_prefix("changelog-")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        }
        // Tags are create-only; an expiry's fence (`expiring-*`, see
        // `crate::maintenance::tags`) is read by every tag creation.
        "tag" => named("expiring-"),
        "consumer" => named("consumer-"),
        _ => false,
    }
}

/// A new name beside `file` for writing it aside before it gets its name:
/// `.NAME.<uuid>.tmp`, which orphan-file removal knows as an atomic
/// write's temporary, should a crash leave it there.
pub(crate) fn temporary_beside(file: &std::path::Path) -> std::path::PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()))
}

/// `table` reopened on `file_io`, on its branch.
fn reopen(table: &Table, file_io: paimon::io::FileIO) -> paimon::Result<Table> {
    let opened = Table::new(
        file_io,
        table.identifier().clone(),
        table.location().to_string(),
        table.schema().clone(),
        None,
    );
    if table.branch() == opened.branch() {
        Ok(opened)
    } else {
        opened.copy_with_resolved_schema(table.schema().clone(), table.branch())
    }
}

/// Whether `key` configures object storage (`s3.*`, `s3a.*`, `fs.*`).
pub(crate) fn is_storage_key(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    ["s3.", "s3a.", "fs."].iter().any(|p| key.starts_with(p))
}

/// Whether the value of option `key` is a secret that must never print:
/// keys, tokens, passwords, credentials. Matches the spellings of every
/// store and of Paimon's file IO (`s3.secret-key`, `fs.s3a.access.key`,
/// `s3.session.token`, `client.security.sasl.password`, ...).
pub(crate) fn is_secret(key: &str) -> bool {
    let key = key.trim().trim_matches('\'').to_ascii_lowercase();
    ["secret", "token", "password", "credential", "jaas"]
        .iter()
        .any(|word| key.contains(word))
        || key.ends_with("access-key")
        || key.ends_with("access.key")
        || key.ends_with("access_key")
        || key.ends_with("access-key-id")
        || key.ends_with("account-key")
        || key.ends_with("account.key")
        || key.ends_with("accesskeyid")
        || key.ends_with("accesskeysecret")
        || key.ends_with("sse.key")
        || key.ends_with("sse-c.key")
}

/// `text` (statements as typed) with the value of every secret option
/// (`'s3.secret-key' = '...'`, `"s3.secret-key" => '...'`, or `OPTIONS
/// ('s3.secret-key' '...')`; see [`is_secret`]) replaced by `'***'`: what
/// the shell keeps in its history. Text that does not tokenize as SQL and
/// might hold a secret comes back empty: not kept at all.
pub fn redact_secrets(text: &str) -> String {
    use sqlparser::dialect::GenericDialect;
    use sqlparser::tokenizer::{Token, Tokenizer};

    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, text).tokenize_with_location() else {
        let lower = text.to_ascii_lowercase();
        let risky = ["secret", "token", "password", "key", "credential"]
            .iter()
            .any(|word| lower.contains(word));
        return if risky {
            String::new()
        } else {
            text.to_string()
        };
    };
    // Byte offsets of the tokens' starts (locations are 1-based lines and
    // character columns).
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> usize {
        let start = line_starts
            .get((line.max(1) - 1) as usize)
            .copied()
            .unwrap_or(text.len());
        text[start..]
            .char_indices()
            .nth((column.max(1) - 1) as usize)
            .map_or(text.len(), |(i, _)| start + i)
    };
    let starts: Vec<usize> = tokens
        .iter()
        .map(|t| offset(t.span.start.line, t.span.start.column))
        .collect();
    let key_of = |token: &Token| -> Option<String> {
        match token {
            Token::SingleQuotedString(s)
            | Token::DoubleQuotedString(s)
            | Token::EscapedStringLiteral(s)
            | Token::NationalStringLiteral(s)
            | Token::UnicodeStringLiteral(s) => Some(s.clone()),
            Token::Word(word) => Some(word.value.clone()),
            _ => None,
        }
    };
    // The tokens that are not whitespace or comments, by index.
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_) | Token::EOF))
        .collect();
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    for (n, &i) in significant.iter().enumerate() {
        if !key_of(&tokens[i].token).is_some_and(|key| is_secret(&key)) {
            continue;
        }
        let Some(&next) = significant.get(n + 1) else {
            continue;
        };
        let value = match tokens[next].token {
            Token::Eq | Token::RArrow | Token::Colon => significant.get(n + 2).copied(),
            // `OPTIONS ('key' 'value')`: no `=` between.
            Token::Comma | Token::RParen | Token::SemiColon => None,
            _ => Some(next),
        };
        if let Some(value) = value {
            if matches!(tokens[value].token, Token::Comma | Token::RParen) {
                continue;
            }
            let end = starts.get(value + 1).copied().unwrap_or(text.len());
            hidden.push((starts[value], end));
        }
    }
    hidden.sort();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in hidden {
        if start < at {
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str("'***'");
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// Paimon's S3 options that this crate's S3 clients do not apply yet:
/// with them set, tables would be written other than the user asked
/// (unencrypted, as another identity), so a catalog that sets one is
/// refused. (The `s3.` spelling; `s3a.` and `fs.s3a.` are the same.)
const UNSUPPORTED: &[&str] = &[
    "sse.type",
    "sse.key",
    "sse-c.algorithm",
    "sse-c.key",
    "sse-c.key.md5",
    "assumed.role.arn",
    "assumed.role.externalid",
    "assumed.role.session.name",
    "anonymous",
    "storage.class",
];

/// Refuses S3 options that Paimon reads but this crate's S3 clients would
/// silently leave out (see [`UNSUPPORTED`]), naming the option.
pub(crate) fn check_options(options: &HashMap<String, String>) -> crate::Result<()> {
    for key in options.keys() {
        let lower = key.trim().to_ascii_lowercase();
        let rest = ["s3.", "s3a.", "fs.s3a."]
            .iter()
            .find_map(|prefix| lower.strip_prefix(prefix));
        if rest.is_some_and(|rest| UNSUPPORTED.contains(&rest)) {
            return Err(crate::Error::InvalidOption {
                key: key.clone(),
                reason:
                    "paimon-lakestream's S3 file IO does not apply this option yet (server-side \
                         encryption, assumed roles, anonymous access and storage classes): \
                         tables would be written without it. Leave it out, or give the \
                         identity through the AWS environment (AWS_PROFILE, web identity)"
                        .to_string(),
            });
        }
    }
    Ok(())
}

/// The S3 options of a catalog. `Debug` names the options that are set,
/// never a value other than the endpoint, region and style.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct S3Options {
    endpoint: Option<String>,
    access_key: Option<String>,
    secret_key: Option<String>,
    session_token: Option<String>,
    region: Option<String>,
    path_style: bool,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |v: &Option<String>| if v.is_some() { "<set>" } else { "<unset>" };
        let endpoint = self.endpoint.as_ref().map(|e| match Url::parse(e) {
            Ok(url) if !url.username().is_empty() || url.password().is_some() => {
                "<endpoint with credentials>".to_string()
            }
            _ => e.clone(),
        });
        f.debug_struct("S3Options")
            .field("endpoint", &endpoint)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("access_key", &set(&self.access_key))
            .field("secret_key", &set(&self.secret_key))
            .field("session_token", &set(&self.session_token))
            .finish()
    }
}

impl S3Options {
    /// Reads the S3 options among a catalog's options; other keys are
    /// ignored. Java's prefixes (`fs.s3a.`, `s3a.`) and dotted spellings
    /// (`s3.access.key`) are accepted; `s3.` spellings win.
    pub fn from_options<'a>(options: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut found: HashMap<String, (u8, String)> = HashMap::new();
        for (key, value) in options {
            let key = key.trim().to_ascii_lowercase();
            let (rank, rest) = if let Some(rest) = key.strip_prefix("s3.") {
                (0, rest)
            } else if let Some(rest) = key.strip_prefix("s3a.") {
                (1, rest)
            } else if let Some(rest) = key.strip_prefix("fs.s3a.") {
                (2, rest)
            } else {
                continue;
            };
            let canonical = match rest {
                "endpoint" => "endpoint",
                "access-key" | "access.key" => "access-key",
                "secret-key" | "secret.key" => "secret-key",
                "session.token" | "session-token" => "session-token",
                "region" | "endpoint.region" => "region",
                "path-style-access" | "path.style.access" => "path-style",
                _ => continue,
            };
            let value = value.trim().to_string();
            if value.is_empty() {
                continue;
            }
            match found.get(canonical) {
                Some((held, _)) if *held <= rank => {}
                _ => {
                    found.insert(canonical.to_string(), (rank, value));
                }
            }
        }
        let mut take = |key: &str| found.remove(key).map(|(_, v)| v);
        S3Options {
            endpoint: take("endpoint"),
            access_key: take("access-key"),
            secret_key: take("secret-key"),
            session_token: take("session-token"),
            region: take("region"),
            path_style: take("path-style").is_some_and(|v| v.eq_ignore_ascii_case("true")),
        }
    }

    /// A client for `bucket`: this build has no S3 support.
    #[cfg(not(feature = "s3"))]
    pub(crate) fn object_store(
        &self,
        bucket: &str,
    ) -> Result<object_store::memory::InMemory, String> {
        let _ = bucket;
        Err("this build of paimon-lakestream has no S3 support (the cargo feature 's3')".into())
    }

    /// The endpoint as a URL: `https://` is assumed when none is written.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    fn endpoint_url(&self) -> Option<String> {
        self.endpoint.as_ref().map(|e| {
            if e.contains("://") {
                e.trim_end_matches('/').to_string()
            } else {
                format!("https://{}", e.trim_end_matches('/'))
            }
        })
    }

    /// The region: the option, else the AWS environment's, else `us-east-1`.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    fn region(&self) -> String {
        self.region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .unwrap_or_else(|| "us-east-1".to_string())
    }

    /// How requests reach `bucket`, read once for both clients: the
    /// endpoint (none: AWS's own) and whether the bucket goes in the host
    /// name (virtual-hosted style, the default) or in the path. An endpoint
    /// that cannot take the bucket in its host name (an IP address) is
    /// refused in virtual-hosted style, naming the option that fixes it.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    fn addressing(&self, bucket: &str) -> Result<Addressing, String> {
        let Some(endpoint) = self.endpoint_url() else {
            return Ok(Addressing {
                endpoint: None,
                virtual_host: !self.path_style,
            });
        };
        if !self.path_style {
            let url =
                Url::parse(&endpoint).map_err(|e| format!("'s3.endpoint' is not a URL: {e}"))?;
            let host = url.host_str().unwrap_or_default().to_string();
            let mut with_bucket = url.clone();
            if with_bucket
                .set_host(Some(&format!("{bucket}.{host}")))
                .is_err()
                || matches!(url.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)))
                || host.parse::<std::net::IpAddr>().is_ok()
            {
                return Err(format!(
                    "'s3.endpoint' ({host}) takes no bucket in its host name \
                     (virtual-hosted style, the default): set \
                     's3.path-style-access' = 'true'"
                ));
            }
        }
        Ok(Addressing {
            endpoint: Some(endpoint),
            virtual_host: !self.path_style,
        })
    }

    /// An object_store client for `bucket` (the `local` store's root).
    #[cfg(feature = "s3")]
    pub(crate) fn object_store(&self, bucket: &str) -> Result<AmazonS3, String> {
        let addressing = self.addressing(bucket)?;
        // With keys in the options, the environment's (a session token, an
        // endpoint) must not mix in; without, it is where credentials come from.
        let builder = if self.access_key.is_some() {
            AmazonS3Builder::new()
        } else {
            AmazonS3Builder::from_env()
        };
        let mut builder = builder
            .with_bucket_name(bucket)
            .with_region(self.region())
            .with_virtual_hosted_style_request(addressing.virtual_host);
        if let Some(key) = &self.access_key {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &self.secret_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(token) = &self.session_token {
            builder = builder.with_token(token);
        }
        if let Some(endpoint) = addressing.endpoint {
            if endpoint.starts_with("http://") {
                builder = builder.with_allow_http(true);
            }
            builder = if addressing.virtual_host {
                // object_store wants the bucket in a virtual-hosted endpoint.
                let mut url = Url::parse(&endpoint)
                    .map_err(|e| format!("'s3.endpoint' is not a URL: {e}"))?;
                let host = format!("{bucket}.{}", url.host_str().unwrap_or_default());
                url.set_host(Some(&host))
                    .map_err(|e| format!("'s3.endpoint' takes no bucket in its host name: {e}"))?;
                builder.with_endpoint(url.as_str().trim_end_matches('/'))
            } else {
                builder.with_endpoint(endpoint)
            };
        }
        builder.build().map_err(|e| e.to_string())
    }

    /// An opendal operator for `bucket` (Paimon's file IO).
    #[cfg(feature = "s3")]
    pub(crate) fn operator(&self, bucket: &str) -> Result<opendal::Operator, String> {
        let addressing = self.addressing(bucket)?;
        let mut builder = opendal_service_s3::S3::default()
            .bucket(bucket)
            .root("/")
            .region(&self.region());
        if let Some(endpoint) = &addressing.endpoint {
            builder = builder.endpoint(endpoint);
        }
        if let Some(key) = &self.access_key {
            builder = builder.access_key_id(key);
        }
        if let Some(secret) = &self.secret_key {
            builder = builder.secret_access_key(secret);
        }
        if let Some(token) = &self.session_token {
            builder = builder.session_token(token);
        }
        if addressing.virtual_host {
            builder = builder.enable_virtual_host_style();
        }
        let operator = opendal::Operator::new(builder).map_err(|e| e.to_string())?;
        let transport = opendal::HttpTransporter::new(
            opendal_http_transport_reqwest::ReqwestTransport::default(),
        );
        Ok(operator.with_context(opendal::OperationContext::new().with_http_transport(transport)))
    }
}

/// How an S3 client addresses a bucket ([`S3Options::addressing`]).
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
struct Addressing {
    /// The endpoint URL without the bucket; none: AWS's own.
    endpoint: Option<String>,
    /// The bucket in the host name (else in the path).
    virtual_host: bool,
}

/// `catalog` with safe commits on S3 ([`commit`]) or local disk
/// ([`local`]) when its warehouse is there; otherwise `catalog` itself.
pub(crate) fn guard_catalog(
    catalog: Arc<dyn Catalog>,
    catalog_options: &HashMap<String, String>,
) -> GuardedCatalog {
    match catalog::guard(Arc::clone(&catalog), catalog_options) {
        Some(safe) => GuardedCatalog {
            catalog: Arc::clone(&safe) as Arc<dyn Catalog>,
            safe: Some(safe),
        },
        None => GuardedCatalog {
            catalog,
            safe: None,
        },
    }
}

/// A check that an `ALTER TABLE`'s changes may be applied to a schema: the
/// schema the catalog is about to extend (see
/// [`GuardedCatalog::alter_table_checked`]).
pub(crate) type SchemaCheck<'a> = dyn Fn(&TableSchema) -> paimon::Result<()> + Send + Sync + 'a;

/// A catalog as [`guard_catalog`] made it, with an `ALTER TABLE` that checks
/// its changes against the schema they are applied to.
pub(crate) struct GuardedCatalog {
    /// The catalog: every statement goes through it.
    pub(crate) catalog: Arc<dyn Catalog>,
    /// The same catalog when it commits safely, for its checked ALTER.
    safe: Option<Arc<catalog::SafeCommits>>,
}

impl GuardedCatalog {
    /// `ALTER TABLE`, with `check` run on the schema the changes are
    /// applied to, each time they are (under the database's schema lock; a
    /// file-system catalog applies them again to a newer schema another
    /// process published first): a change is never applied to a schema
    /// `check` did not pass. A catalog this crate does not make the DDL of
    /// (a REST catalog's server, a warehouse neither on S3 nor on local
    /// disk) applies the changes as it does, without `check`: its caller
    /// checked the schema it read before.
    pub(crate) async fn alter_table_checked(
        &self,
        identifier: &Identifier,
        changes: Vec<SchemaChange>,
        ignore_if_not_exists: bool,
        check: &SchemaCheck<'_>,
    ) -> paimon::Result<()> {
        match &self.safe {
            Some(safe) => {
                safe.alter_table_checked(identifier, changes, ignore_if_not_exists, check)
                    .await
            }
            None => {
                self.catalog
                    .alter_table(identifier, changes, ignore_if_not_exists)
                    .await
            }
        }
    }
}

/// `table` for a commit that may create snapshot `next` and no other, when
/// it is on S3 (see [`commit`]); otherwise `table` itself.
pub(crate) fn fenced_table(table: &Table, s3: &S3Options, next: i64) -> paimon::Result<Table> {
    #[cfg(feature = "s3")]
    return commit::fenced(table, s3, next);
    #[cfg(not(feature = "s3"))]
    {
        let _ = (s3, next);
        Ok(table.clone())
    }
}

/// The bucket and the key under it of an S3 location.
pub(crate) fn split(location: &str) -> Result<(String, String), String> {
    let url = Url::parse(location).map_err(|e| format!("'{location}' is not a URL: {e}"))?;
    if !SCHEMES.contains(&url.scheme()) {
        return Err(format!(
            "'{location}' is not an S3 location (s3://bucket/path)"
        ));
    }
    let bucket = url
        .host_str()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| format!("'{location}' names no bucket (s3://bucket/path)"))?
        .to_string();
    let prefix = format!("{}://{bucket}/", url.scheme());
    let key = location
        .get(prefix.len()..)
        .filter(|_| location[..prefix.len().min(location.len())].eq_ignore_ascii_case(&prefix))
        .unwrap_or("")
        .to_string();
    Ok((bucket, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn local_locations_are_read_one_way() {
        for (location, path) in [
            ("/w", Some("/w")),
            ("/w/t.db/", Some("/w/t.db/")),
            ("file:/w", Some("/w")),
            ("file:///w", Some("/w")),
            // A host is not this machine's disk.
            ("file://host/w", None),
            ("file:w", None),
            ("w", None),
            ("s3://b/w", None),
            ("S3A://b/w", None),
            ("/a/s3://b", None),
            // paimon spells the scheme in lower case only.
            ("FILE:/w", None),
        ] {
            assert_eq!(
                local_path(location),
                path.map(std::path::PathBuf::from),
                "{location}"
            );
            assert_eq!(is_local(location), path.is_some(), "{location}");
        }
        assert_eq!(without_file_scheme("file:w"), Some("w"));
        assert_eq!(without_file_scheme("w"), Some("w"));
        assert_eq!(without_file_scheme("file://host/w"), None);
        assert_eq!(without_file_scheme("s3://b/w"), None);
    }

    #[test]
    fn credentials_in_a_location_url_are_refused_and_never_print() {
        for location in [
            "s3://AKIDKEY:TOPSECRET@bucket/w",
            "s3a://AKIDKEY@bucket/w",
            "s3://AKIDKEY:TOPSECRET@bucket/w/t.db/t",
        ] {
            let err = refuse_credentials_in_url("warehouse", location)
                .expect_err(location)
                .to_string();
            assert!(err.contains("invalid option 'warehouse'"), "{err}");
            assert!(err.contains("credentials in its URL"), "{err}");
            assert!(
                !err.contains("AKIDKEY") && !err.contains("TOPSECRET"),
                "{err}"
            );
        }
        for location in ["s3://bucket/w", "/tmp/w", "file:/tmp/w", "relative/w"] {
            assert!(
                refuse_credentials_in_url("warehouse", location).is_ok(),
                "{location}"
            );
        }
    }

    /// Both clients read the endpoint one way: an IP endpoint in
    /// virtual-hosted style is refused by each, naming the fix; in path
    /// style both take it. (The object_store client refused it before the
    /// two shared one reading; paimon's file IO sent requests to
    /// `bucket.127.0.0.1`.)
    #[cfg(feature = "s3")]
    #[test]
    fn both_clients_address_a_bucket_the_same_way() {
        for endpoint in ["127.0.0.1:9000", "http://[::1]:9000", "https://10.0.0.7"] {
            let virtual_host = S3Options::from_options(&options(&[("s3.endpoint", endpoint)]));
            for refused in [
                virtual_host.object_store("b").err(),
                virtual_host.operator("b").err(),
            ] {
                let message = refused.unwrap_or_else(|| panic!("{endpoint}: accepted"));
                assert!(
                    message.contains("set 's3.path-style-access' = 'true'"),
                    "{endpoint}: {message}"
                );
            }
            let path_style = S3Options::from_options(&options(&[
                ("s3.endpoint", endpoint),
                ("s3.path-style-access", "true"),
                ("s3.region", "r"),
            ]));
            assert!(path_style.object_store("b").is_ok(), "{endpoint}");
            assert!(path_style.operator("b").is_ok(), "{endpoint}");
        }
        let named = S3Options::from_options(&options(&[
            ("s3.endpoint", "https://s3.example.com"),
            ("s3.region", "r"),
        ]));
        assert!(named.object_store("b").is_ok());
        assert!(named.operator("b").is_ok());
    }

    #[test]
    fn options_are_read_in_every_spelling_and_never_print() {
        let parsed = S3Options::from_options(&options(&[
            ("fs.s3a.access.key", "AKIDJAVA"),
            ("s3.access-key", "AKID"),
            ("s3a.secret.key", "S3CR3T"),
            ("s3.session.token", "T0K3N"),
            ("s3.endpoint", "127.0.0.1:9000"),
            ("s3.path-style-access", "TRUE"),
            ("warehouse", "s3://b/w"),
        ]));
        assert_eq!(parsed.access_key.as_deref(), Some("AKID"));
        assert_eq!(parsed.secret_key.as_deref(), Some("S3CR3T"));
        assert_eq!(parsed.session_token.as_deref(), Some("T0K3N"));
        assert!(parsed.path_style);
        assert_eq!(
            parsed.endpoint_url().as_deref(),
            Some("https://127.0.0.1:9000")
        );
        let shown = format!("{parsed:?}");
        for secret in ["AKID", "S3CR3T", "T0K3N"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn secret_keys_are_named() {
        for key in [
            "s3.secret-key",
            "s3.access-key",
            "fs.s3a.access.key",
            "S3.Session.Token",
            "'s3.secret.key'",
            "client.security.sasl.password",
            "client.security.sasl.jaas.config",
            "s3.sse-c.key",
            "azure.account-key",
            "fs.oss.accessKeyId",
        ] {
            assert!(is_secret(key), "{key}");
        }
        for key in [
            "s3.endpoint",
            "s3.region",
            "warehouse",
            "local.path",
            "s3.path-style-access",
        ] {
            assert!(!is_secret(key), "{key}");
        }
    }

    #[test]
    fn secret_values_are_redacted_from_statements() {
        let cases = [
            (
                "CREATE CATALOG c WITH ('warehouse' = 's3://b/w', 's3.access-key'='AK', \
                 's3.secret-key' =  'it''s secret', 'x' = 'y');",
                "CREATE CATALOG c WITH ('warehouse' = 's3://b/w', 's3.access-key'='***', \
                 's3.secret-key' =  '***', 'x' = 'y');",
            ),
            (
                "CREATE CATALOG c WITH (\"s3.secret-key\" = \"SEKRIT\")",
                "CREATE CATALOG c WITH (\"s3.secret-key\" = '***')",
            ),
            (
                "-- don't keep it\nCREATE CATALOG c WITH ('s3.secret-key' /* c */ = E'SEK\\'RIT')",
                "-- don't keep it\nCREATE CATALOG c WITH ('s3.secret-key' /* c */ = '***')",
            ),
            (
                "CREATE EXTERNAL TABLE t STORED AS PAIMON LOCATION 's3://b/w/db.db/t' \
                 OPTIONS ('s3.endpoint' 'http://h', 's3.secret-key' 'SEKRIT')",
                "CREATE EXTERNAL TABLE t STORED AS PAIMON LOCATION 's3://b/w/db.db/t' \
                 OPTIONS ('s3.endpoint' 'http://h', 's3.secret-key' '***')",
            ),
            ("SELECT 'é', 's3.secret-key'", "SELECT 'é', 's3.secret-key'"),
            ("SELECT 1", "SELECT 1"),
        ];
        for (typed, kept) in cases {
            assert_eq!(redact_secrets(typed), kept, "{typed}");
        }
        // Text that is no SQL and may hold a key is not kept.
        assert_eq!(redact_secrets("'s3.secret-key' = 'unterminated"), "");
        assert_eq!(redact_secrets("'unterminated"), "'unterminated");
    }

    #[test]
    fn options_the_clients_would_leave_out_are_refused() {
        for key in [
            "s3.sse.type",
            "fs.s3a.assumed.role.arn",
            "s3a.anonymous",
            "S3.Storage.Class",
        ] {
            let error = check_options(&options(&[(key, "x")]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(key), "{error}");
        }
        check_options(&options(&[
            ("s3.endpoint", "http://h"),
            ("s3.region", "r"),
            ("warehouse", "s3://b/w"),
        ]))
        .unwrap();
    }

    #[cfg(feature = "s3")]
    #[test]
    fn an_endpoint_without_a_host_name_needs_path_style() {
        let s3 = S3Options::from_options(&options(&[("s3.endpoint", "http://127.0.0.1:9000")]));
        let error = s3.object_store("b").unwrap_err();
        assert!(error.contains("s3.path-style-access"), "{error}");
        let s3 = S3Options::from_options(&options(&[
            ("s3.endpoint", "http://127.0.0.1:9000"),
            ("s3.path-style-access", "true"),
        ]));
        s3.object_store("b").unwrap();
    }

    #[test]
    fn locations_split_into_bucket_and_key() {
        assert_eq!(
            split("s3://b/w/db.db/t").unwrap(),
            ("b".to_string(), "w/db.db/t".to_string())
        );
        assert_eq!(split("s3a://b/").unwrap(), ("b".to_string(), String::new()));
        assert!(split("s3:///w").is_err());
        assert!(split("file:///w").is_err());
        assert!(is_s3("S3://b/w") && is_s3("s3a://b") && !is_s3("/s3://") && !is_s3("s3://"));
    }
}
