//! The Fluss store's options: catalog options `fluss.<key>` arrive here as
//! `<key>` and become a fluss-rs `Config`, the store's own timeouts, and the
//! properties of the Fluss tables the store creates.
//!
//! Keys follow the Fluss Java client's names. Values of secret keys (SASL
//! settings, passwords) never appear in errors, logs or `Debug` output.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use fluss::config::{Config, NoKeyAssigner};

use crate::error::{Error, Result};
use crate::options::parse_duration;

/// How the store reaches the cluster and what it creates there.
#[derive(Clone)]
pub(crate) struct FlussOptions {
    /// The fluss-rs client configuration.
    pub(crate) config: Config,
    /// Bounds every request the store makes (metadata, writes, reads).
    pub(crate) request_timeout: Duration,
    /// Properties (`table.*`) of the Fluss tables the store creates.
    pub(crate) table_properties: BTreeMap<String, String>,
}

impl fmt::Debug for FlussOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlussOptions")
            .field("bootstrap.servers", &self.config.bootstrap_servers)
            .field("request_timeout", &self.request_timeout)
            .field("table_properties", &self.table_properties)
            .finish_non_exhaustive()
    }
}

impl FlussOptions {
    /// The bootstrap servers, for messages.
    pub(crate) fn bootstrap(&self) -> &str {
        &self.config.bootstrap_servers
    }
}

/// The keys the store knows, with what they set. `table.*` keys are the
/// properties of the Fluss tables the store creates.
const KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.connect-timeout",
    "client.request-timeout",
    "client.writer.acks",
    "client.writer.retries",
    "client.writer.batch-size",
    "client.writer.batch-timeout",
    "client.writer.buffer.memory-size",
    "client.writer.buffer.wait-timeout",
    "client.writer.request-max-size",
    "client.writer.enable-idempotence",
    "client.writer.max-inflight-requests-per-bucket",
    "client.writer.bucket.no-key-assigner",
    "client.writer.dynamic-batch-size.enabled",
    "client.scanner.log.max-poll-records",
    "client.scanner.log.fetch.max-bytes",
    "client.scanner.log.fetch.max-bytes-for-bucket",
    "client.scanner.log.fetch.min-bytes",
    "client.scanner.log.fetch.wait-max-time",
    "client.scanner.remote-log.prefetch-num",
    "client.scanner.remote-log.read-concurrency",
    "client.remote-file.download-thread-num",
    "client.security.protocol",
    "client.security.sasl.mechanism",
    "client.security.sasl.username",
    "client.security.sasl.password",
    "client.security.sasl.jaas.config",
];

/// Table properties the store sets itself.
const MANAGED_TABLE_PROPERTIES: &[&str] = &["table.datalake.enabled", "table.datalake.format"];

/// The default of `client.request-timeout`.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The default of `client.connect-timeout` (fluss-rs: 15 s).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the value of `key` must never be shown.
pub(crate) fn is_secret(key: &str) -> bool {
    key.contains("password")
        || key.contains(".sasl.")
        || key.contains("secret")
        || key.ends_with(".jaas.config")
}

fn known_keys() -> String {
    let mut keys: Vec<&str> = KEYS.to_vec();
    keys.push("table.<property> (properties of the Fluss tables the store creates)");
    keys.join(", ")
}

fn invalid(key: &str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        key: format!("fluss.{key}"),
        reason: reason.into(),
    }
}

/// Reads the store's options. `options` are the catalog's `fluss.<key>`
/// options with the prefix stripped.
pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<FlussOptions> {
    let mut config = Config {
        connect_timeout_ms: millis(DEFAULT_CONNECT_TIMEOUT),
        ..Config::default()
    };
    let mut request_timeout = DEFAULT_REQUEST_TIMEOUT;
    let mut table_properties = BTreeMap::new();
    let mut bootstrap = None;
    for (key, value) in options {
        if key.starts_with("table.") {
            if MANAGED_TABLE_PROPERTIES.contains(&key.as_str()) {
                return Err(invalid(
                    key,
                    "the store sets this table property itself: it turns tiering into the \
                     table's Paimon table on",
                ));
            }
            table_properties.insert(key.clone(), value.clone());
            continue;
        }
        if !KEYS.contains(&key.as_str()) {
            return Err(invalid(
                key,
                format!(
                    "the fluss store has no such option; the known keys (each written \
                     'fluss.<key>') are: {}",
                    known_keys()
                ),
            ));
        }
        let value = value.trim();
        let bad = |what: &str| {
            if is_secret(key) {
                invalid(key, format!("the value is not {what} (value hidden)"))
            } else {
                invalid(key, format!("'{value}' is not {what}"))
            }
        };
        let duration = || parse_duration(value).map_err(|_| bad("a duration such as 30s or 500ms"));
        let bytes = || parse_bytes(value).ok_or_else(|| bad("a size such as 2mb, 512kb or 1024"));
        let count = || {
            value
                .parse::<usize>()
                .map_err(|_| bad("a non-negative integer"))
        };
        let flag = || match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad("true or false")),
        };
        match key.as_str() {
            "bootstrap.servers" => {
                if value.is_empty() {
                    return Err(bad("a list of host:port"));
                }
                bootstrap = Some(value.to_string());
            }
            "client.connect-timeout" => config.connect_timeout_ms = millis(duration()?),
            "client.request-timeout" => {
                request_timeout = duration()?;
                if request_timeout.is_zero() {
                    return Err(bad("a positive duration"));
                }
            }
            // A statement is answered once Fluss acknowledged its rows,
            // and the contract makes that answer a promise: only `all`
            // (every in-sync replica has them) can keep it.
            "client.writer.acks" => {
                if !value.eq_ignore_ascii_case("all") && value != "-1" {
                    return Err(invalid(
                        key,
                        format!(
                            "'{value}' would let Fluss acknowledge rows that one failed server \
                             loses, and a lake-stream write is answered only once its rows are \
                             safe: use 'all' (the default)"
                        ),
                    ));
                }
                config.writer_acks = "all".to_string();
            }
            "client.writer.retries" => {
                config.writer_retries = i32::try_from(count()?).map_err(|_| bad("an int"))?
            }
            "client.writer.batch-size" => config.writer_batch_size = to_i32(bytes()?, &bad)?,
            "client.writer.batch-timeout" => {
                config.writer_batch_timeout_ms =
                    i64::try_from(millis(duration()?)).map_err(|_| bad("a duration"))?
            }
            "client.writer.buffer.memory-size" => {
                config.writer_buffer_memory_size =
                    usize::try_from(bytes()?).map_err(|_| bad("a size"))?
            }
            "client.writer.buffer.wait-timeout" => {
                config.writer_buffer_wait_timeout_ms = millis(duration()?)
            }
            "client.writer.request-max-size" => {
                config.writer_request_max_size = to_i32(bytes()?, &bad)?
            }
            // Idempotence keeps a retried batch from being written twice,
            // and makes the writer notice rows a restarted server lost.
            "client.writer.enable-idempotence" => {
                if !flag()? {
                    return Err(invalid(
                        key,
                        "'false' would let a retried batch be written twice; the store keeps \
                         it on"
                            .to_string(),
                    ));
                }
            }
            "client.writer.max-inflight-requests-per-bucket" => {
                config.writer_max_inflight_requests_per_bucket = count()?
            }
            "client.writer.bucket.no-key-assigner" => {
                config.writer_bucket_no_key_assigner = match value {
                    "sticky" => NoKeyAssigner::Sticky,
                    "round_robin" | "round-robin" => NoKeyAssigner::RoundRobin,
                    _ => return Err(bad("sticky or round_robin")),
                }
            }
            "client.writer.dynamic-batch-size.enabled" => {
                config.writer_dynamic_batch_size_enabled = flag()?
            }
            "client.scanner.log.max-poll-records" => config.scanner_log_max_poll_records = count()?,
            "client.scanner.log.fetch.max-bytes" => {
                config.scanner_log_fetch_max_bytes = to_i32(bytes()?, &bad)?
            }
            "client.scanner.log.fetch.max-bytes-for-bucket" => {
                config.scanner_log_fetch_max_bytes_for_bucket = to_i32(bytes()?, &bad)?
            }
            "client.scanner.log.fetch.min-bytes" => {
                config.scanner_log_fetch_min_bytes = to_i32(bytes()?, &bad)?
            }
            "client.scanner.log.fetch.wait-max-time" => {
                config.scanner_log_fetch_wait_max_time_ms =
                    i32::try_from(millis(duration()?)).map_err(|_| bad("a shorter duration"))?
            }
            "client.scanner.remote-log.prefetch-num" => {
                config.scanner_remote_log_prefetch_num = count()?
            }
            "client.scanner.remote-log.read-concurrency" => {
                config.scanner_remote_log_read_concurrency = count()?
            }
            "client.remote-file.download-thread-num" => {
                config.remote_file_download_thread_num = count()?
            }
            "client.security.protocol" => {
                if !value.eq_ignore_ascii_case("plaintext") && !value.eq_ignore_ascii_case("sasl") {
                    return Err(bad("PLAINTEXT or SASL"));
                }
                config.security_protocol = value.to_string();
            }
            "client.security.sasl.mechanism" => config.security_sasl_mechanism = value.to_string(),
            "client.security.sasl.username" => config.security_sasl_username = value.to_string(),
            "client.security.sasl.password" => config.security_sasl_password = value.to_string(),
            "client.security.sasl.jaas.config" => {
                let (username, password) = parse_jaas(value).ok_or_else(|| {
                    bad("a PLAIN JAAS configuration with username=\"...\" and password=\"...\"")
                })?;
                config.security_sasl_username = username;
                config.security_sasl_password = password;
            }
            _ => return Err(invalid(key, "unhandled option")),
        }
    }
    let Some(bootstrap) = bootstrap else {
        return Err(invalid(
            "bootstrap.servers",
            "the fluss store needs the address of the Fluss cluster: set the catalog option \
             'fluss.bootstrap.servers' = 'host:port[,host:port...]'",
        ));
    };
    config.bootstrap_servers = bootstrap;
    if let Err(message) = config
        .validate_security()
        .and_then(|()| config.validate_scanner())
        .and_then(|()| config.validate_writer())
    {
        // fluss-rs names fields, never values, in these messages.
        return Err(invalid("client", message));
    }
    Ok(FlussOptions {
        config,
        request_timeout,
        table_properties,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn to_i32(bytes: u64, bad: &dyn Fn(&str) -> Error) -> Result<i32> {
    i32::try_from(bytes).map_err(|_| bad("a size below 2gb"))
}

/// `1024`, `512b`, `64kb`, `2mb`, `1gb` (also `k`, `m`, `g`, `kib`, ...).
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// The username and password of a PLAIN JAAS configuration, as the Java
/// client takes it: `... PlainLoginModule required username="u" password="p";`.
fn parse_jaas(text: &str) -> Option<(String, String)> {
    let value = |name: &str| {
        let start = text.find(&format!("{name}=\""))? + name.len() + 2;
        let end = text[start..].find('"')? + start;
        Some(text[start..end].to_string())
    };
    Some((value("username")?, value("password")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::map_of as options;

    #[test]
    fn maps_client_options_onto_the_config() {
        let parsed = parse(&options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("client.connect-timeout", "2s"),
            ("client.request-timeout", "5s"),
            ("client.writer.batch-size", "1mb"),
            ("client.writer.acks", "all"),
            ("client.scanner.log.max-poll-records", "100"),
            ("table.datalake.freshness", "10s"),
        ]))
        .expect("valid options");
        assert_eq!(parsed.config.bootstrap_servers, "127.0.0.1:9123");
        assert_eq!(parsed.config.connect_timeout_ms, 2000);
        assert_eq!(parsed.request_timeout, Duration::from_secs(5));
        assert_eq!(parsed.config.writer_batch_size, 1 << 20);
        assert_eq!(parsed.config.scanner_log_max_poll_records, 100);
        assert_eq!(
            parsed.table_properties.get("table.datalake.freshness"),
            Some(&"10s".to_string())
        );
    }

    #[test]
    fn an_unknown_key_lists_the_known_ones() {
        let error = parse(&options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("client.writer.bogus", "1"),
        ]))
        .expect_err("unknown key");
        let text = error.to_string();
        assert!(text.contains("'fluss.client.writer.bogus'"), "{text}");
        assert!(text.contains("bootstrap.servers"), "{text}");
        assert!(text.contains("client.request-timeout"), "{text}");
    }

    /// An acknowledgement is a promise: weaker acks and writers without
    /// idempotence are refused, naming the option.
    #[test]
    fn weaker_acknowledgements_are_refused() {
        for (key, value) in [
            ("client.writer.acks", "0"),
            ("client.writer.acks", "1"),
            ("client.writer.enable-idempotence", "false"),
        ] {
            let error = parse(&options(&[
                ("bootstrap.servers", "127.0.0.1:9123"),
                (key, value),
            ]))
            .expect_err(value);
            let text = error.to_string();
            assert!(text.contains(&format!("'fluss.{key}'")), "{text}");
        }
        for value in ["all", "ALL", "-1"] {
            let parsed = parse(&options(&[
                ("bootstrap.servers", "127.0.0.1:9123"),
                ("client.writer.acks", value),
            ]))
            .expect(value);
            assert_eq!(parsed.config.writer_acks, "all");
        }
    }

    #[test]
    fn bootstrap_servers_are_required() {
        let error = parse(&options(&[])).expect_err("no servers");
        assert!(error.to_string().contains("fluss.bootstrap.servers"));
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug() {
        let secret = "s3cr3t-value";
        let sasl = options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("client.security.protocol", "SASL"),
            (
                "client.security.sasl.jaas.config",
                "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required \
                 username=\"admin\" password=\"s3cr3t-value\";",
            ),
        ]);
        let parsed = parse(&sasl).expect("valid SASL options");
        assert_eq!(parsed.config.security_sasl_username, "admin");
        assert_eq!(parsed.config.security_sasl_password, secret);
        assert!(!format!("{parsed:?}").contains(secret));

        let broken = options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("client.security.sasl.jaas.config", secret),
        ]);
        let text = parse(&broken).expect_err("not JAAS").to_string();
        assert!(!text.contains(secret), "{text}");
        assert!(text.contains("value hidden"), "{text}");

        let missing_password = options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("client.security.protocol", "SASL"),
            ("client.security.sasl.username", "admin"),
        ]);
        let text = parse(&missing_password)
            .expect_err("no password")
            .to_string();
        assert!(text.contains("password"), "{text}");
    }

    #[test]
    fn managed_table_properties_are_refused() {
        let error = parse(&options(&[
            ("bootstrap.servers", "127.0.0.1:9123"),
            ("table.datalake.enabled", "false"),
        ]))
        .expect_err("managed");
        assert!(error
            .to_string()
            .contains("sets this table property itself"));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1024"), Some(1024));
        assert_eq!(parse_bytes("2mb"), Some(2 << 20));
        assert_eq!(parse_bytes("64 KB"), Some(64 << 10));
        assert_eq!(parse_bytes("lots"), None);
    }
}
