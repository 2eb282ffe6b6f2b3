//! Where the store's primary is: the one server a `redis://` URL names, or
//! whichever server a set of Sentinels names as the master
//! (`redis+sentinel://host:port,host:port/<master>[/<db>]`, a password as in
//! a `redis://` URL). With Sentinels, a failed call asks them again (one
//! question at a time, in the background), and a master at another address
//! is connected to from then on: a failover, which the fleet treats as a
//! Redis that restarted empty, since the promoted replica may lack the last
//! writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::Client;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use crate::error::StoreError;

/// The scheme of a Sentinel configuration.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// Where to connect.
enum Target {
    Url(Client),
    Sentinel(Sentinels),
}

/// A master's name and the Sentinels that know where it is.
struct Sentinels {
    master: String,
    sentinels: Vec<Client>,
    /// What comes after the address in the master's URL: `/<db>`.
    db: String,
    /// `[user]:password@`, or empty.
    auth: String,
}

/// The connection to the current primary.
pub(crate) struct Primary {
    target: Target,
    /// How long one connection (or one question to a Sentinel) may take.
    connect: Duration,
    /// A `redis://` target's one connection manager.
    fixed: OnceCell<ConnectionManager>,
    /// A Sentinel target's current master and its connection manager.
    current: Mutex<Option<(String, ConnectionManager)>>,
    asking: Arc<AtomicBool>,
    /// Bumped each time the Sentinels named a master at another address.
    moves: AtomicU64,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Url(client) => write!(f, "{}", client.get_connection_info().addr()),
            Target::Sentinel(s) => {
                write!(f, "master {} of {} sentinels", s.master, s.sentinels.len())
            }
        }
    }
}

impl Primary {
    /// Refuses a URL that cannot work (a clear error when the client is
    /// built); connects only on the first call.
    pub fn parse(url: &str, connect: Duration) -> Result<Primary, String> {
        let target = match url.strip_prefix(SENTINEL_SCHEME) {
            Some(rest) => Target::Sentinel(Sentinels::parse(rest)?),
            None => Target::Url(Client::open(url).map_err(|e| e.to_string())?),
        };
        Ok(Primary {
            target,
            connect,
            fixed: OnceCell::new(),
            current: Mutex::new(None),
            asking: Arc::new(AtomicBool::new(false)),
            moves: AtomicU64::new(0),
        })
    }

    /// The connection manager of the current primary (it reconnects on its
    /// own); with Sentinels, asked for first, within the connect time.
    pub async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        match &self.target {
            Target::Url(client) => {
                let manager = (self.fixed)
                    .get_or_try_init(|| async {
                        ConnectionManager::new_lazy_with_config(client.clone(), self.config())
                    })
                    .await
                    .map_err(|e| StoreError::Redis(e.to_string()))?;
                Ok(manager.clone())
            }
            Target::Sentinel(sentinels) => {
                if let Some((_, manager)) = &*self.lock() {
                    return Ok(manager.clone());
                }
                let master = sentinels.master_addr(self.connect).await?;
                self.connect_to(sentinels, master)
            }
        }
    }

    /// How many times the primary moved (a failover the Sentinels made).
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// The current primary's address (`host:port`), when Sentinels name it.
    pub fn address(&self) -> Option<String> {
        self.lock().as_ref().map(|(addr, _)| addr.clone())
    }

    /// A call failed: with Sentinels, they are asked again where the master
    /// is, once at a time, in the background.
    pub fn failed(self: &Arc<Self>) {
        if !matches!(self.target, Target::Sentinel(_)) || self.asking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.asking.store(false, Ordering::Release);
            return;
        };
        let primary = Arc::clone(self);
        handle.spawn(async move {
            if let Target::Sentinel(sentinels) = &primary.target
                && let Ok(master) = sentinels.master_addr(primary.connect).await
            {
                let _ = primary.connect_to(sentinels, master);
            }
            // One question per connect time at most, while calls fail.
            tokio::time::sleep(primary.connect).await;
            primary.asking.store(false, Ordering::Release);
        });
    }

    /// The manager for `master`, made anew when it is another address.
    fn connect_to(
        &self,
        sentinels: &Sentinels,
        master: String,
    ) -> Result<ConnectionManager, StoreError> {
        let mut current = self.lock();
        if let Some((addr, manager)) = &*current
            && *addr == master
        {
            return Ok(manager.clone());
        }
        let url = format!("redis://{}{master}{}", sentinels.auth, sentinels.db);
        let client = Client::open(url).map_err(|e| StoreError::Redis(e.to_string()))?;
        let manager = ConnectionManager::new_lazy_with_config(client, self.config())
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        if current.is_some() {
            self.moves.fetch_add(1, Ordering::AcqRel);
        }
        *current = Some((master, manager.clone()));
        Ok(manager)
    }

    /// Each call is bounded by the store's deadline; these only free what a
    /// hung Redis would hold.
    fn config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect))
            .set_response_timeout(Some(self.connect))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(String, ConnectionManager)>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Sentinels {
    /// `[auth@]host:port,host:port/<master>[/<db>]`.
    fn parse(rest: &str) -> Result<Sentinels, String> {
        let bad = |why: &str| format!("invalid Redis URL: {SENTINEL_SCHEME}{rest}: {why}");
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (format!("{auth}@"), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no master name"))?;
        let (master, db) = match path.split_once('/') {
            Some((master, db)) => (master, db),
            None => (path, ""),
        };
        if master.is_empty() {
            return Err(bad("no master name"));
        }
        if !db.is_empty() && db.parse::<u16>().is_err() {
            return Err(bad("the database is not a number"));
        }
        let sentinels = (hosts.split(',').filter(|h| !h.is_empty()))
            .map(|host| Client::open(format!("redis://{host}/")).map_err(|e| bad(&e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(bad("no sentinel address"));
        }
        Ok(Sentinels {
            master: master.to_owned(),
            sentinels,
            db: if db.is_empty() {
                String::new()
            } else {
                format!("/{db}")
            },
            auth,
        })
    }

    /// The first answer of a Sentinel that knows the master, each asked
    /// within `within`.
    async fn master_addr(&self, within: Duration) -> Result<String, StoreError> {
        let mut last = String::from("no sentinel answered");
        for sentinel in &self.sentinels {
            let asked = async {
                let mut connection = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut connection)
                    .await
            };
            match tokio::time::timeout(within, asked).await {
                Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
                Ok(Ok(None)) => last = format!("no sentinel knows master {}", self.master),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "a sentinel did not answer in time".into(),
            }
        }
        Err(StoreError::Redis(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_master_and_sentinels_or_is_refused() {
        let ms = Duration::from_millis(100);
        let ok = Primary::parse(
            "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/grag/2",
            ms,
        )
        .unwrap();
        match &ok.target {
            Target::Sentinel(s) => {
                assert_eq!(
                    (
                        s.master.as_str(),
                        s.sentinels.len(),
                        s.db.as_str(),
                        s.auth.as_str()
                    ),
                    ("grag", 2, "/2", ":pw@")
                );
            }
            Target::Url(_) => panic!("a sentinel target"),
        }
        for bad in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel:///grag",
            "redis+sentinel://127.0.0.1:26379/grag/x",
        ] {
            let error = Primary::parse(bad, ms).expect_err(bad);
            assert!(error.contains("invalid Redis URL"), "{bad}: {error}");
        }
    }
}
