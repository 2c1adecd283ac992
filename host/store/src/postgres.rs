//! The store on PostgreSQL, for several hosts on one database.
//!
//! The tables are redb's, one SQL table each (`postgres/migrations`),
//! made by versioned migrations applied when the store opens. Every
//! write goes through the same `apply` as on redb, over an [`Overlay`]
//! of one transaction: a batch fetches the rows its writes read in a few
//! statements, applies the writes in memory, and sends what they changed
//! in one statement per table, then commits. Batches are serialized by
//! one transaction-scoped advisory lock, as redb serializes its write
//! transactions, so a write's conditions hold until it commits, on any
//! host. Reads run beside the batches, each statement on its own
//! snapshot, from a pool of connections.
//!
//! The store's calls are blocking, as the [`Store`] trait is: each runs
//! its statements on the store's own Tokio runtime and waits for them, on
//! the calling thread, or on a thread of its own when called from inside
//! another runtime.

mod connect;
mod reads;
mod rows;
mod schema;

pub use connect::DEFAULT_POOL_SIZE;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::runtime::Runtime;

use self::rows::Overlay;
use crate::{Refused, Store, StoreError, Wake, Wakes, Write};

/// How long a call waits for a connection, or for the server to accept
/// one, before it fails (and is tried again by its caller).
const CONNECT: Duration = Duration::from_secs(5);

/// What every batch does first: bounds its waits (a host paused inside a
/// transaction loses it, and its lock, after 10 s idle; a batch waits at
/// most 30 s for the lock, a statement runs at most 60 s; a batch that
/// runs into a bound fails, and its writes are tried again), then takes
/// the store's lock, per schema: `pg_advisory_xact_lock(a, b)` with `a`
/// this number and `b` a hash of the schema's name.
const LOCK: &str = "SET LOCAL idle_in_transaction_session_timeout = '10s'; \
     SET LOCAL lock_timeout = '30s'; SET LOCAL statement_timeout = '60s'; \
     SELECT pg_advisory_xact_lock(2021161080, hashtext(current_schema()))";

/// What a claim of parked runs does first: the bounds of [`LOCK`], then
/// the store's lock shared. Claims of several hosts run at once, each
/// passing over the rows another has locked (`FOR UPDATE SKIP LOCKED`),
/// while a batch, which takes the lock alone, waits for them: a claim
/// reads and writes only the runs it took.
const SHARED_LOCK: &str = "SET LOCAL idle_in_transaction_session_timeout = '10s'; \
     SET LOCAL lock_timeout = '30s'; SET LOCAL statement_timeout = '60s'; \
     SELECT pg_advisory_xact_lock_shared(2021161080, hashtext(current_schema()))";

/// The oldest parked runs not of the tenants in `$1`, up to `$2`, locked
/// for this claim; rows another claim holds are passed over.
const CLAIMABLE: &str = "SELECT k1, v FROM parked WHERE NOT (v = ANY($1)) \
     ORDER BY k1 LIMIT $2 FOR UPDATE SKIP LOCKED";

/// The same, of tenant `$1` alone.
const CLAIMABLE_OF: &str = "SELECT k1, v FROM parked WHERE v = $1 \
     ORDER BY k1 LIMIT $2 FOR UPDATE SKIP LOCKED";

/// What a store's batches have cost since it opened ([`PostgresStore::batch_costs`]),
/// for `weft bench`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCosts {
    /// Batches committed.
    pub batches: u64,
    /// Their time, from taking a connection to the commit's answer.
    pub took: Duration,
    /// The part of it spent on the statement that takes the store's lock:
    /// one round trip, and the wait for the batches of other hosts that
    /// hold it.
    pub locking: Duration,
    /// Their round trips to the server.
    pub trips: u64,
}

/// A migration of the tables, as [`PostgresStore::migrations`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMigration {
    /// Its number: migrations apply in this order.
    pub version: i32,
    /// What it makes, in a word or two.
    pub name: String,
    /// When it was applied, as PostgreSQL writes a time; `None` if not yet.
    pub applied_at: Option<String>,
    /// Whether this build knows it (one applied by a newer build does not).
    pub known: bool,
}

/// The channel of the news hosts send each other, one per database;
/// each notice says `SCHEMA/KIND` ([`Wake`]), so that stores in other
/// schemas pass over it.
const CHANNEL: &str = "weft";

/// What a batch that makes news sends, as part of its transaction.
const NOTIFY: &str =
    "SELECT pg_notify('weft', current_schema() || '/' || kind) FROM unnest($1::text[]) AS kind";

/// The store in a PostgreSQL database.
pub struct PostgresStore {
    pool: Pool,
    /// Taken only as the store drops, to shut it down without waiting.
    rt: Option<Runtime>,
    /// The URL without its password, for messages.
    shown: String,
    /// The schema of [`PostgresStore::open_in`], if one was named.
    schema: Option<String>,
    /// The news heard from other hosts' batches ([`listen`]).
    wakes: Arc<Wakes>,
    /// What the batches committed so far cost.
    costs: std::sync::Mutex<BatchCosts>,
    /// Why the last batch failed, while the database refuses writes
    /// ([`StoreError::NoSpace`], [`StoreError::Unavailable`]): what
    /// [`Store::degraded`] says until a batch commits again.
    failing: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// A failure of the server or of the connection to it. A server out of
/// space is [`StoreError::NoSpace`]; one that takes no writes now (read
/// only, out of other resources, shutting down) or cannot be reached is
/// [`StoreError::Unavailable`]; both are counted in
/// `weft_store_failures_total`.
pub(crate) fn sql(error: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    let said = || {
        error
            .as_db_error()
            .map_or_else(|| error.to_string(), |db| db.message().to_owned())
    };
    let refused = match error.code() {
        Some(code) if *code == SqlState::DISK_FULL => Some(StoreError::NoSpace {
            dir: "the PostgreSQL server's data directory".to_owned(),
        }),
        Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => {
            Some(StoreError::Unavailable {
                why: format!(
                    "the PostgreSQL database is read-only ({}); the host goes on once it takes writes",
                    said()
                ),
            })
        }
        Some(code) if code.code().starts_with("53") => Some(StoreError::Unavailable {
            why: format!(
                "the PostgreSQL server is out of resources ({}); the host goes on once it has them",
                said()
            ),
        }),
        Some(code) if code.code().starts_with("08") || code.code().starts_with("57P") => {
            Some(StoreError::Unavailable {
                why: format!("the PostgreSQL server cannot serve now ({})", said()),
            })
        }
        None if error
            .to_string()
            .starts_with("error performing TLS handshake") =>
        {
            let cause = std::error::Error::source(&error)
                .map_or_else(String::new, |cause| format!(": {cause}"));
            Some(StoreError::Unavailable {
                why: format!(
                    "no TLS connection to the PostgreSQL server ({error}{cause}); see sslmode and sslrootcert in the store's URL"
                ),
            })
        }
        None if error.is_closed() => Some(StoreError::Unavailable {
            why: format!("the connection to PostgreSQL closed ({error})"),
        }),
        None if std::error::Error::source(&error).is_some_and(|s| s.is::<std::io::Error>()) => {
            Some(StoreError::Unavailable {
                why: format!("cannot reach the PostgreSQL server ({error})"),
            })
        }
        _ => None,
    };
    match refused {
        Some(refused) => {
            weft_core::metrics::count_store_failure();
            refused
        }
        None => StoreError::Backend(Arc::new(error)),
    }
}

/// What [`StoreError::Unavailable`] says when the pool had no connection
/// free in time.
const POOL_BUSY: &str = "no connection to PostgreSQL came free in time";

fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => sql(error),
        deadpool_postgres::PoolError::Timeout(_) => {
            weft_core::metrics::count_store_failure();
            StoreError::Unavailable {
                why: POOL_BUSY.to_owned(),
            }
        }
        other => StoreError::Backend(Arc::new(other)),
    }
}

/// `url` as it may be shown: without a password.
fn shown(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`,
    /// or any form `tokio-postgres` reads, with libpq's `sslmode` and
    /// `sslrootcert` and weft's `schema` and `pool_size`: see
    /// `postgres/connect.rs`) and applies the migrations it lacks.
    /// Blocking. An unreachable server, refused credentials, a server
    /// whose certificate does not pass `sslmode`, or a database newer than
    /// this build fail here.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::connect(url, None, None, true)
    }

    /// [`PostgresStore::open`], with weft's tables in schema `schema`
    /// (made if it does not exist) rather than the URL's or the
    /// connection's default: several stores in one database, a test's
    /// each.
    pub fn open_in(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        Self::connect(url, schema, None, true)
    }

    /// [`PostgresStore::open`], with a pool of at most `pool_size`
    /// connections, whatever the URL says (`weft --store-pool`).
    pub fn open_pooled(url: &str, pool_size: usize) -> Result<Self, StoreError> {
        Self::connect(url, None, Some(pool_size), true)
    }

    /// A store at `url`: its migrations applied if `migrate`.
    fn connect(
        url: &str,
        schema: Option<&str>,
        pool_size: Option<usize>,
        migrate: bool,
    ) -> Result<Self, StoreError> {
        let settings = connect::parse(url)?;
        let mut config: tokio_postgres::Config =
            settings.driver.parse().map_err(|e| StoreError::Config {
                what: "the store's URL".to_owned(),
                message: format!("not a PostgreSQL URL ({e})"),
            })?;
        let schema = schema.or(settings.schema.as_deref());
        if let Some(schema) = schema {
            connect::plain_name(schema)?;
            config.options(format!("-c search_path={schema}"));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT);
        }
        if config.get_application_name().is_none() {
            config.application_name("weft");
        }
        // A server or a path that goes away unannounced is noticed in
        // about 25 s, not the system's two hours.
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3);
        let shown = shown(&config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weft-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(Arc::new(e)))?;
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(connect::tls(&settings)?);
        let listening = (config.clone(), tls.clone());
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(
                pool_size
                    .or(settings.pool_size)
                    .unwrap_or(DEFAULT_POOL_SIZE),
            )
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(CONNECT))
            .create_timeout(Some(CONNECT))
            .recycle_timeout(Some(CONNECT))
            .build()
            .map_err(|e| StoreError::Backend(Arc::new(e)))?;
        let store = Self {
            pool,
            rt: Some(rt),
            shown,
            schema: schema.map(str::to_owned),
            wakes: Arc::new(Wakes::default()),
            costs: std::sync::Mutex::new(BatchCosts::default()),
            failing: std::sync::Mutex::new(None),
        };
        if migrate {
            store.plain(|store| store.migrate(store.schema.as_deref()))?;
            let (config, tls) = listening;
            store
                .runtime()
                .spawn(listen(config, tls, Arc::clone(&store.wakes)));
        }
        Ok(store)
    }

    /// The migrations this build knows, each with when it was applied to
    /// the database at `url` (`None`: not yet), then any the database has
    /// that this build does not know (a newer build's). Applies nothing.
    /// Blocking.
    pub fn migrations(url: &str) -> Result<Vec<SchemaMigration>, StoreError> {
        let store = Self::connect(url, None, Some(2), false)?;
        store.plain(|store| {
            let client = store.client()?;
            store.block(async {
                let made = client
                    .query_one("SELECT to_regclass('weft_migrations') IS NOT NULL", &[])
                    .await
                    .map_err(sql)?;
                let rows = if made.try_get::<_, bool>(0).map_err(sql)? {
                    client
                        .query(
                            "SELECT version, name, applied_at::text FROM weft_migrations ORDER BY version",
                            &[],
                        )
                        .await
                        .map_err(sql)?
                } else {
                    Vec::new()
                };
                let mut applied = std::collections::BTreeMap::new();
                for row in rows {
                    let version: i32 = row.try_get(0).map_err(sql)?;
                    let name: String = row.try_get(1).map_err(sql)?;
                    let at: String = row.try_get(2).map_err(sql)?;
                    applied.insert(version, (name, at));
                }
                let mut listed: Vec<SchemaMigration> = schema::MIGRATIONS
                    .iter()
                    .map(|(version, name, _)| SchemaMigration {
                        version: *version,
                        name: (*name).to_owned(),
                        applied_at: applied.remove(version).map(|(_, at)| at),
                        known: true,
                    })
                    .collect();
                listed.extend(applied.into_iter().map(|(version, (name, at))| SchemaMigration {
                    version,
                    name,
                    applied_at: Some(at),
                    known: false,
                }));
                Ok(listed)
            })
        })
    }

    /// `url` with `schema` as the connection's search path: the URL that
    /// reaches a store made by [`PostgresStore::open_in`], for a process
    /// that takes only a URL (`weft serve --store`).
    pub fn url_in(url: &str, schema: &str) -> String {
        let joint = if url.contains('?') { '&' } else { '?' };
        format!("{url}{joint}schema={schema}")
    }

    /// Drops the schema this store was opened in ([`PostgresStore::open_in`])
    /// with everything in it: a throwaway store's end. A store opened
    /// without a schema is left as it is. Blocking.
    pub fn discard(&self) -> Result<(), StoreError> {
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        self.plain(|store| {
            let client = store.client()?;
            let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            store.block(client.batch_execute(&drop)).map_err(sql)
        })
    }

    /// The URL of the database, without its password.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Runs `f` on a thread outside any Tokio runtime, where it may block
    /// on this store's: the calling thread, unless that is inside one.
    fn plain<T: Send>(&self, f: impl FnOnce(&Self) -> T + Send) -> T {
        if tokio::runtime::Handle::try_current().is_err() {
            return f(self);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| f(self))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    fn block<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime().block_on(future)
    }

    fn runtime(&self) -> &Runtime {
        self.rt
            .as_ref()
            .unwrap_or_else(|| unreachable!("the runtime goes only with the store"))
    }

    /// A connection from the pool.
    fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.block(self.pool.get()).map_err(pool_error)
    }

    /// Applies the migrations the database lacks, in one transaction that
    /// holds the store's lock: hosts that start together migrate once.
    fn migrate(&self, schema: Option<&str>) -> Result<(), StoreError> {
        let mut client = self.client()?;
        self.block(async {
            if let Some(schema) = schema {
                // Under a lock of the schema's name: two stores opened at
                // once in a new schema would both try to make it.
                let txn = client.transaction().await.map_err(sql)?;
                txn.execute(
                    "SELECT pg_advisory_xact_lock(2021161080, hashtext($1))",
                    &[&schema],
                )
                .await
                .map_err(sql)?;
                let make = format!("CREATE SCHEMA IF NOT EXISTS {schema}");
                txn.batch_execute(&make).await.map_err(sql)?;
                txn.commit().await.map_err(sql)?;
            }
            let txn = client.transaction().await.map_err(sql)?;
            txn.batch_execute(LOCK).await.map_err(sql)?;
            txn.batch_execute(
                "CREATE TABLE IF NOT EXISTS weft_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )",
            )
            .await
            .map_err(sql)?;
            let row = txn
                .query_one("SELECT coalesce(max(version), 0) FROM weft_migrations", &[])
                .await
                .map_err(sql)?;
            let applied: i32 = row.try_get(0).map_err(sql)?;
            if applied > schema::newest() {
                return Err(StoreError::Format {
                    path: self.shown.clone(),
                    found: applied.to_string(),
                    expected: schema::newest().to_string(),
                });
            }
            for (version, name, statements) in schema::MIGRATIONS {
                if *version <= applied {
                    continue;
                }
                tracing::info!(version, name, "applying a migration to {}", self.shown);
                txn.batch_execute(statements).await.map_err(sql)?;
                txn.execute(
                    "INSERT INTO weft_migrations (version, name) VALUES ($1, $2)",
                    &[version, name],
                )
                .await
                .map_err(sql)?;
            }
            txn.commit().await.map_err(sql)
        })
    }

    /// A transaction on `client` that has run `first` (the bounds and
    /// the store's lock, [`LOCK`] or [`SHARED_LOCK`]): read committed
    /// whatever the server's default, so that each statement after the
    /// lock sees every batch committed before it.
    fn locked<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
        first: &str,
    ) -> Result<deadpool_postgres::Transaction<'c>, tokio_postgres::Error> {
        let mut locking = Duration::ZERO;
        self.locked_timed(client, first, &mut locking)
    }

    /// [`PostgresStore::locked`], adding the time `first` took to
    /// `locking`.
    fn locked_timed<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
        first: &str,
        locking: &mut Duration,
    ) -> Result<deadpool_postgres::Transaction<'c>, tokio_postgres::Error> {
        let txn = self.block(
            client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
                .start(),
        )?;
        let began = std::time::Instant::now();
        self.block(txn.batch_execute(first))?;
        *locking += began.elapsed();
        Ok(txn)
    }

    /// Sends `news` to every host on the database (this one too), as
    /// part of `txn`: it is heard if `txn` commits, when it commits.
    fn tell(
        &self,
        txn: &deadpool_postgres::Transaction<'_>,
        news: &[Wake],
    ) -> Result<(), StoreError> {
        if news.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = news.iter().map(|wake| wake.name()).collect();
        self.block(txn.execute(NOTIFY, &[&names]))
            .map(drop)
            .map_err(sql)
    }

    /// What this store's batches have cost since it opened.
    pub fn batch_costs(&self) -> BatchCosts {
        *weft_core::lock(&self.costs)
    }

    /// One batch: see the module's documentation.
    fn apply_batch(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError> {
        let began = std::time::Instant::now();
        let mut locking = Duration::ZERO;
        let mut tries = 0;
        let mut client = self.client()?;
        let txn = loop {
            match self.locked_timed(&mut client, LOCK, &mut locking) {
                Ok(txn) => break txn,
                // A pooled connection that closed since it was last used
                // (cut as a commit was answered, its end not noticed yet)
                // fails as the transaction begins, before any COMMIT:
                // nothing of it can be stored, and it begins again on
                // another connection, once.
                Err(e) if e.is_closed() && tries == 0 => tries += 1,
                Err(e) => return Err(sql(e)),
            }
            client = self.client()?;
        };
        let trips;
        let results = {
            let mut overlay = Overlay::new(&txn, self.runtime());
            let mut reads = Vec::new();
            for write in writes {
                crate::apply::reads(write, &mut reads);
            }
            overlay.prefetch(&reads)?;
            let results = crate::apply::batch(&mut overlay, writes)?;
            let news = overlay.flush()?;
            self.tell(&txn, &news)?;
            // Begin, lock, the overlay's statements, the news, commit.
            trips = 3 + overlay.trips() + u64::from(!news.is_empty());
            results
        };
        self.block(txn.commit()).map_err(sql)?;
        let mut costs = weft_core::lock(&self.costs);
        costs.batches += 1;
        costs.took += began.elapsed();
        costs.locking += locking;
        costs.trips += trips;
        Ok(results)
    }
}

impl PostgresStore {
    /// Takes up to `n` parked runs for `host`: see
    /// [`Store::claim_parked`], and [`SHARED_LOCK`] for how hosts claim
    /// at once.
    fn claim_batch(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut tries = 0;
        let mut client = self.client()?;
        let txn = loop {
            match self.locked(&mut client, SHARED_LOCK) {
                Ok(txn) => break txn,
                // As in `apply_batch`: closed before any COMMIT.
                Err(e) if e.is_closed() && tries == 0 => tries += 1,
                Err(e) => return Err(sql(e)),
            }
            client = self.client()?;
        };
        let limit = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // The tenants without a room first, then each with room on its
        // own, up to its room: the oldest `n` of what they found.
        let capped: Vec<&[u8]> = rooms.iter().map(|(t, _)| t.as_bytes()).collect();
        let mut rows = self
            .block(txn.query(CLAIMABLE, &[&capped, &limit(n)]))
            .map_err(sql)?;
        for (tenant, room) in rooms.iter().filter(|(_, room)| *room > 0) {
            let tenant = tenant.as_bytes();
            let of = self
                .block(txn.query(CLAIMABLE_OF, &[&tenant, &limit(n.min(*room))]))
                .map_err(sql)?;
            rows.extend(of);
        }
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            let id: Vec<u8> = row.try_get(0).map_err(sql)?;
            let tenant: Vec<u8> = row.try_get(1).map_err(sql)?;
            ids.push((
                String::from_utf8_lossy(&id).into_owned(),
                String::from_utf8_lossy(&tenant).into_owned(),
            ));
        }
        ids.sort_unstable();
        ids.truncate(n);
        if ids.is_empty() {
            return Ok(ids);
        }
        let taken = {
            let mut overlay = Overlay::new(&txn, self.runtime());
            overlay.prefetch(&crate::apply::claim_reads(&ids))?;
            let taken = crate::apply::claim_parked(&mut overlay, host, &ids)?;
            let news = overlay.flush()?;
            self.tell(&txn, &news)?;
            taken
        };
        self.block(txn.commit()).map_err(sql)?;
        Ok(taken)
    }
}

/// Hears the news other hosts' batches send, while the store is open (its
/// runtime ends with it): on a connection of its own, made again a second
/// after it fails. Every kind is woken as it starts listening, since news
/// sent while it was not is lost.
async fn listen(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    wakes: Arc<Wakes>,
) {
    loop {
        if let Err(e) = listen_once(&config, tls.clone(), &wakes).await {
            tracing::debug!("cannot listen for other hosts' news: {e}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One connection's listening, until it ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    wakes: &Wakes,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
    let (heard, mut news) = tokio::sync::mpsc::unbounded_channel::<String>();
    let driver = tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(notice) = message
                && heard.send(notice.payload().to_owned()).is_err()
            {
                return;
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    let schema: String = client
        .query_one("SELECT current_schema()::text", &[])
        .await?
        .try_get(0)?;
    wakes.wake_all();
    while let Some(payload) = news.recv().await {
        if let Some((of, kind)) = payload.rsplit_once('/')
            && of == schema
            && let Some(kind) = Wake::named(kind)
        {
            wakes.wake(kind);
        }
    }
    driver.abort();
    Ok(())
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which is not allowed on
        // another runtime's threads; this store's tasks are its
        // connections, which may go at once.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Store for PostgresStore {
    fn apply(&self, writes: &[&Write]) -> Result<Vec<Result<(), Refused>>, StoreError> {
        let applied = self.plain(|store| store.apply_batch(writes));
        let failing = match &applied {
            Ok(_) => None,
            // A pool that had no connection free in time is a busy host,
            // not a failing database.
            Err(StoreError::Unavailable { why }) if why.starts_with(POOL_BUSY) => return applied,
            Err(e @ (StoreError::NoSpace { .. } | StoreError::Unavailable { .. })) => {
                Some(e.to_string())
            }
            // Any other failure says nothing of the database's state.
            Err(_) => return applied,
        };
        *weft_core::lock(&self.failing) = failing;
        applied
    }

    fn degraded(&self) -> Option<String> {
        weft_core::lock(&self.failing).clone()
    }

    fn wakes(&self) -> Option<Arc<Wakes>> {
        Some(Arc::clone(&self.wakes))
    }

    fn runs_from(&self, after: Option<&str>, limit: usize) -> Result<crate::RunsFrom, StoreError> {
        self.plain(|store| store.read_runs_from(after, limit))
    }

    fn messages_from(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<crate::MessageRecord>, StoreError> {
        self.plain(|store| store.read_messages_from(after, limit))
    }

    fn kv_from(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<crate::KvRow>, StoreError> {
        self.plain(|store| store.read_kv_from(after, limit))
    }

    fn parked(&self, limit: usize) -> Result<Vec<(String, String)>, StoreError> {
        self.plain(|store| store.read_parked(limit))
    }

    fn claim_parked(
        &self,
        host: &str,
        n: usize,
        rooms: &[(String, usize)],
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.plain(|store| store.claim_batch(host, n, rooms))
    }

    fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.plain(|store| store.read_stored_bytes(tenant))
    }

    fn run(&self, id: &str) -> Result<Option<crate::RunRecord>, StoreError> {
        self.plain(|store| store.read_run(id))
    }

    fn runs(
        &self,
        filter: &crate::RunFilter,
        limit: usize,
    ) -> Result<Vec<crate::RunRecord>, StoreError> {
        self.plain(|store| store.read_runs(filter, limit))
    }

    fn steps(&self, id: &str) -> Result<Vec<crate::StepRecord>, StoreError> {
        self.plain(|store| store.read_steps(id))
    }

    fn steps_page(
        &self,
        id: &str,
        after: Option<u32>,
        limit: usize,
    ) -> Result<Vec<crate::StepRecord>, StoreError> {
        self.plain(|store| store.read_steps_page(id, after, limit))
    }

    fn running(&self) -> Result<Vec<crate::RunRecord>, StoreError> {
        self.plain(Self::read_running)
    }

    fn running_ids(&self) -> Result<Vec<String>, StoreError> {
        self.plain(Self::read_running_ids)
    }

    fn marks(&self) -> Result<Vec<(String, weft_core::Timestamp)>, StoreError> {
        self.plain(Self::read_marks)
    }

    fn digests(&self, blob: crate::Blob) -> Result<Vec<String>, StoreError> {
        self.plain(|store| store.read_digests(blob))
    }

    fn definition(&self, digest: &str) -> Result<Option<crate::DefinitionRecord>, StoreError> {
        self.plain(|store| store.read_definition(digest))
    }

    fn timer_keys(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        self.plain(Self::read_timer_keys)
    }

    fn timer(&self, key: (u64, u64)) -> Result<Option<crate::TimerRecord>, StoreError> {
        self.plain(|store| store.read_timer(key))
    }

    fn run_timers(&self, id: &str) -> Result<Vec<crate::TimerRecord>, StoreError> {
        self.plain(|store| store.read_run_timers(id))
    }

    fn schedules(&self) -> Result<Vec<crate::ScheduleRecord>, StoreError> {
        self.plain(Self::read_schedules)
    }

    fn outbox(&self) -> Result<Vec<crate::OutboxRecord>, StoreError> {
        self.plain(Self::read_outbox)
    }

    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.plain(|store| store.read_component(digest))
    }

    fn kv_get(&self, space: &str, key: &str) -> Result<weft_core::Versioned, StoreError> {
        self.plain(|store| store.read_kv(space, key))
    }

    fn kv_list(
        &self,
        space: &str,
        prefix: &str,
        limit: usize,
        now: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.plain(|store| store.read_kv_list(space, prefix, limit, now))
    }

    fn subscriptions(
        &self,
        channel: Option<&str>,
    ) -> Result<Vec<crate::SubscriptionRecord>, StoreError> {
        self.plain(|store| store.read_subscriptions(channel))
    }

    fn subscription(&self, key: &str) -> Result<Option<crate::SubscriptionRecord>, StoreError> {
        self.plain(|store| store.read_subscription(key))
    }

    fn delivery(&self, id: &str) -> Result<Option<crate::DeliveryRecord>, StoreError> {
        self.plain(|store| store.read_delivery(id))
    }

    fn message(&self, seq: u64) -> Result<Option<crate::MessageRecord>, StoreError> {
        self.plain(|store| store.read_message(seq))
    }

    fn queued(
        &self,
        subscription: &str,
        dead: bool,
        after: u64,
        limit: usize,
    ) -> Result<Vec<crate::DeliveryRecord>, StoreError> {
        self.plain(|store| store.read_queued(subscription, dead, after, limit))
    }

    fn dead_letters(&self, limit: usize) -> Result<Vec<crate::DeliveryRecord>, StoreError> {
        self.plain(|store| store.read_dead_letters(limit))
    }

    fn deliveries(&self, limit: usize) -> Result<Vec<crate::DeliveryRecord>, StoreError> {
        self.plain(|store| store.read_deliveries(limit))
    }

    fn run_messages(&self, id: &str) -> Result<Vec<crate::MessageRecord>, StoreError> {
        self.plain(|store| store.read_run_messages(id))
    }

    fn idempotent_run(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.plain(|store| store.read_idempotent_run(key))
    }

    fn deployments(
        &self,
        workflow: Option<&str>,
    ) -> Result<Vec<crate::DeploymentRecord>, StoreError> {
        self.plain(|store| store.read_deployments(workflow))
    }

    fn plugins(&self) -> Result<Vec<crate::PluginRecord>, StoreError> {
        self.plain(Self::read_plugins)
    }

    fn snapshots(&self, store: Option<&str>) -> Result<Vec<crate::SnapshotRecord>, StoreError> {
        self.plain(|s| s.read_snapshots(store))
    }

    fn snapshot_entry(
        &self,
        data: &str,
        key: &str,
    ) -> Result<Option<crate::SnapshotEntry>, StoreError> {
        self.plain(|s| s.read_snapshot_entry(data, key))
    }

    fn snapshot_entries(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, crate::SnapshotEntry)>, StoreError> {
        self.plain(|s| s.read_snapshot_entries(data, after, prefix, limit))
    }

    fn snapshot_keys(
        &self,
        data: &str,
        after: Option<&str>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        self.plain(|s| s.read_snapshot_keys(data, after, prefix, limit))
    }

    fn snapshot_data(&self) -> Result<Vec<(String, crate::SnapshotData)>, StoreError> {
        self.plain(Self::read_snapshot_data)
    }

    fn damaged(&self) -> Result<Vec<crate::Damaged>, StoreError> {
        self.plain(Self::read_damaged)
    }

    fn lease(&self, id: &str) -> Result<Option<crate::Lease>, StoreError> {
        self.plain(|store| store.read_lease(id))
    }

    fn hosts(&self) -> Result<Vec<crate::HostRecord>, StoreError> {
        self.plain(Self::read_hosts)
    }

    fn tenants(&self) -> Result<Vec<crate::TenantRecord>, StoreError> {
        self.plain(Self::read_tenants)
    }

    fn token(&self, id: &str) -> Result<Option<crate::TokenRecord>, StoreError> {
        self.plain(|store| store.read_token(id))
    }

    fn tokens(&self) -> Result<Vec<crate::TokenRecord>, StoreError> {
        self.plain(Self::read_tokens)
    }

    fn secret(&self, tenant: &str, name: &str) -> Result<Option<crate::SecretRecord>, StoreError> {
        self.plain(|store| store.read_secret(tenant, name))
    }

    fn secrets(&self, tenant: &str) -> Result<Vec<crate::SecretRecord>, StoreError> {
        self.plain(|store| store.read_secrets(tenant))
    }

    fn audit(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::AuditRecord>, StoreError> {
        self.plain(|store| store.read_audit(tenant, limit))
    }
}
