//! Connecting to a Fluss cluster: the factory, and an admin client that
//! finds the coordinator again.

use super::*;
use crate::retry::{Retry, Try};

/// Creates [`FlussStore`]s from the catalog's `fluss.<key>` options.
#[derive(Debug, Default)]
pub struct FlussStoreFactory;

#[async_trait]
impl StoreFactory for FlussStoreFactory {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    /// Fluss's tiering service tiers (there is no on-demand tiering), and
    /// writes rows its key-value store already merged, and update
    /// before-images, into Paimon: only plain `deduplicate` tables read the
    /// same through `t$rt` and `t`. It keeps its system columns after the
    /// table's in Paimon.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with_tiering(Tiering::ByItsService)
            .with_tiers_its_log(false)
            .with_hidden_columns(&SYSTEM_COLUMNS)
    }

    /// The bootstrap servers, sorted: a cluster is named by its servers.
    fn location(&self, context: &StoreContext) -> Result<Option<String>> {
        let servers = context
            .options
            .get("bootstrap.servers")
            .map_or("", String::as_str);
        Ok(Some(server_set(servers).join(",")))
    }

    /// A cluster is reached through any of its servers: two lists of them
    /// name one cluster when they share one.
    fn same_location(&self, recorded: &str, ours: &str) -> bool {
        let recorded = server_set(recorded);
        server_set(ours)
            .iter()
            .any(|server| recorded.contains(server))
    }

    async fn create(&self, context: StoreContext) -> Result<Arc<dyn LakestreamStore>> {
        let options = options::parse(&context.options)?;
        let servers = options.bootstrap().to_string();
        let bound = Duration::from_millis(options.config.connect_timeout_ms)
            .min(options.request_timeout)
            .max(Duration::from_millis(1));
        let connection =
            match tokio::time::timeout(bound, FlussConnection::new(options.config.clone())).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(e)) => {
                    return Err(Error::StoreUnavailable {
                        store: IDENTIFIER.to_string(),
                        reason: format!(
                        "cannot connect to the Fluss cluster at bootstrap servers '{servers}': {}",
                        describe(&e)
                    ),
                    })
                }
                Err(_) => {
                    return Err(Error::StoreUnavailable {
                        store: IDENTIFIER.to_string(),
                        reason: format!(
                            "the Fluss cluster at bootstrap servers '{servers}' did not answer \
                             within {bound:?} (fluss.client.connect-timeout, \
                             fluss.client.request-timeout)"
                        ),
                    })
                }
            };
        Ok(Arc::new(FlussStore {
            options,
            connection: Arc::new(connection),
            catalog: context.catalog,
            lake: LakeCatalog::of_catalog(&context.catalog_options),
            lake_checked: tokio::sync::OnceCell::new(),
            writers: Mutex::new(HashMap::new()),
            described: std::sync::Mutex::new(HashMap::new()),
        }))
    }
}

/// Fluss's admin client, with a coordinator to send to.
///
/// fluss-rs 1.0 sends admin calls to the coordinator named in its cached
/// cluster metadata, and replaces that metadata with any server's answer. A
/// tablet server that has just restarted answers before it has learned the
/// coordinator, and from then on every admin call fails with "Coordinator
/// server not found in cluster metadata": nothing in fluss-rs refreshes the
/// metadata for an admin call. Asking a (randomly chosen) server again
/// restores it.
pub(crate) trait Coordinated {
    async fn admin(&self) -> fluss::error::Result<Arc<fluss::client::FlussAdmin>>;
}

/// How the cluster's metadata is asked for again while it names no
/// coordinator: three asks in all, 200 ms apart.
const COORDINATOR_AGAIN: Retry =
    Retry::growing(3, Duration::from_millis(200), Duration::from_millis(200));

impl Coordinated for FlussConnection {
    async fn admin(&self) -> fluss::error::Result<Arc<fluss::client::FlussAdmin>> {
        let metadata = self.get_metadata();
        let knows_coordinator = || metadata.get_cluster().get_coordinator_server().is_some();
        if !knows_coordinator() {
            // Still not known after the last ask: the admin call's own
            // error says so (as does a failure of an ask).
            let _: std::result::Result<(), ()> = COORDINATOR_AGAIN
                .run(|| async {
                    let _ = metadata
                        .update_tables_metadata(
                            &std::collections::HashSet::new(),
                            &std::collections::HashSet::new(),
                            vec![],
                        )
                        .await;
                    Ok(if knows_coordinator() {
                        Try::Done(())
                    } else {
                        Try::Again(())
                    })
                })
                .await;
        }
        self.get_admin()
    }
}

/// A server list (`h1:9123, h2:9123`) as a sorted set of addresses.
pub(super) fn server_set(list: &str) -> Vec<String> {
    let mut servers: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    servers.sort();
    servers.dedup();
    servers
}
