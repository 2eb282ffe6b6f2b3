//! The fleet's shared store: Redis, through redis-rs's connection manager
//! (it reconnects on its own) and three Lua scripts, each loaded once and
//! sent with EVALSHA (redis-rs loads it again on NOSCRIPT).
//!
//! Every call is bounded by the policy's deadline: an admission never waits
//! on a dead Redis longer than that. All keys of one tenant share one hash
//! tag, `{<api>:<tenant>}`, so every script runs on Redis Cluster too.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use tokio::sync::OnceCell;

/// What the admission script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Send after this wait: the leases are taken, the token and the window
    /// slots reserved for that instant.
    Go(Duration),
    /// The window slots are reserved this far ahead, and nothing else: ask
    /// again then, without the windows.
    Reserved(Duration),
    /// An in-flight cap is full and nothing was taken: ask again.
    Busy(Duration),
    /// Another replica saw the route dark, for this much longer; what it
    /// saw is `mark` (see [`Fleet::share_dark`](super::Fleet::share_dark)).
    Dark { left: Duration, mark: String },
}

/// One admission's question to the script.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The route's templated path: its dark mark.
    pub route: &'a str,
    /// Unique per admission: the lease and window members.
    pub member: &'a str,
    /// Lease sets (a budget's, or `None`: every request's) and their caps.
    pub leases: &'a [(Option<usize>, u32)],
    /// Window sets and their limits; empty once they are reserved.
    pub windows: &'a [(usize, u32)],
}

/// A store call that did not answer in time, or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within the {0} ms deadline")]
    Deadline(u128),
    #[error("{0}")]
    Redis(String),
}

/// The numbers every admission sends along.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub lease: Duration,
    /// One token every `interval`...
    pub interval: Duration,
    /// ...with a burst of `burst`.
    pub burst: u32,
    /// The rolling windows' width.
    pub window: Duration,
    /// A window slot further ahead than this is reserved alone.
    pub horizon: Duration,
}

/// The keys of one tenant of one API, under one hash tag.
#[derive(Debug, Clone)]
pub struct Keys {
    tag: String,
}

impl Keys {
    pub fn new(api: &str, tenant: &str) -> Self {
        Self {
            tag: format!("{{{api}:{tenant}}}"),
        }
    }

    pub fn pause(&self) -> String {
        format!("{}:pause", self.tag)
    }

    pub fn bucket(&self) -> String {
        format!("{}:bucket", self.tag)
    }

    pub fn replicas(&self) -> String {
        format!("{}:replicas", self.tag)
    }

    /// The in-flight leases of budget `b`, or of all requests (`None`).
    pub fn leases(&self, budget: Option<usize>) -> String {
        match budget {
            Some(b) => format!("{}:leases:{b}", self.tag),
            None => format!("{}:leases:all", self.tag),
        }
    }

    pub fn window(&self, budget: usize) -> String {
        format!("{}:window:{budget}", self.tag)
    }

    /// A dark feature's mark, by route.
    pub fn dark(&self, route: &str) -> String {
        format!("{}:dark:{route}", self.tag)
    }

    /// Who runs the breaker's probe, and what it last saw.
    pub fn prober(&self) -> String {
        format!("{}:prober", self.tag)
    }

    pub fn probe_result(&self) -> String {
        format!("{}:probe", self.tag)
    }
}

/// A Redis the replicas share.
pub struct Store {
    client: Client,
    connection: OnceCell<ConnectionManager>,
    deadline: Duration,
    admit: Script,
    renew: Script,
    pause: Script,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("server", &self.client.get_connection_info().addr())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn from_micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0).unsigned_abs())
}

impl Store {
    /// Refuses a URL redis-rs cannot use (a clear error when the client is
    /// built); connects only on the first call.
    pub fn open(url: &str, deadline: Duration) -> Result<Self, String> {
        let client = Client::open(url).map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            connection: OnceCell::new(),
            deadline,
            admit: Script::new(include_str!("admit.lua")),
            renew: Script::new(include_str!("renew.lua")),
            pause: Script::new(include_str!("pause.lua")),
        })
    }

    /// The connection manager, made on the first call (it needs a runtime).
    /// It connects in the background and reconnects after a failure; a call
    /// meanwhile fails at once (or at its deadline).
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let manager = self
            .connection
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.deadline.max(Duration::from_millis(100))))
                    .set_response_timeout(Some(self.deadline))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(200));
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await
            .map_err(|e| StoreError::Redis(e.to_string()))?;
        Ok(manager.clone())
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Deadline(self.deadline.as_millis())),
        }
    }

    /// One admission: one EVALSHA.
    pub async fn admit(
        &self,
        keys: &Keys,
        shape: &Shape,
        ask: &Ask<'_>,
    ) -> Result<Answer, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.admit.prepare_invoke();
        invocation
            .key(keys.pause())
            .key(keys.bucket())
            .key(keys.dark(ask.route));
        for &(budget, _) in ask.leases {
            invocation.key(keys.leases(budget));
        }
        for &(budget, _) in ask.windows {
            invocation.key(keys.window(budget));
        }
        let tolerance = shape.interval * shape.burst.saturating_sub(1);
        invocation
            .arg(ask.member)
            .arg(micros(shape.lease))
            .arg(micros(shape.interval))
            .arg(micros(tolerance))
            .arg(micros(shape.window))
            .arg(micros(shape.horizon))
            .arg(ask.leases.len());
        for &(_, cap) in ask.leases {
            invocation.arg(cap);
        }
        invocation.arg(ask.windows.len());
        for &(_, limit) in ask.windows {
            invocation.arg(limit);
        }
        let answer: (i64, i64, String) = self
            .bounded(invocation.invoke_async(&mut connection))
            .await?;
        Ok(match answer {
            (0, wait, _) => Answer::Go(from_micros(wait)),
            (1, wait, _) => Answer::Reserved(from_micros(wait)),
            (3, left, mark) => Answer::Dark {
                left: from_micros(left),
                mark,
            },
            (_, wait, _) => Answer::Busy(from_micros(wait)),
        })
    }

    /// Gives back the leases of one admission.
    pub async fn release(
        &self,
        keys: &Keys,
        member: &str,
        leases: &[Option<usize>],
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let mut pipe = redis::pipe();
        for &budget in leases {
            pipe.zrem(keys.leases(budget), member).ignore();
        }
        self.bounded(pipe.query_async::<()>(&mut connection)).await
    }

    /// The heartbeat: this replica is live for one lease, and so are the
    /// leases it holds (by lease set). Answers the live replicas.
    pub async fn renew(
        &self,
        keys: &Keys,
        replica: &str,
        lease: Duration,
        held: &[(Option<usize>, Vec<String>)],
    ) -> Result<Vec<String>, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.renew.prepare_invoke();
        invocation.key(keys.replicas());
        for (budget, _) in held {
            invocation.key(keys.leases(*budget));
        }
        invocation.arg(replica).arg(micros(lease));
        for (_, members) in held {
            invocation.arg(members.len());
            for member in members {
                invocation.arg(member);
            }
        }
        self.bounded(invocation.invoke_async(&mut connection)).await
    }

    /// Pauses every replica for `wait` from now (Redis time), unless a
    /// longer pause is already set.
    pub async fn pause(&self, keys: &Keys, wait: Duration) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.pause.key(keys.pause());
        invocation.arg(micros(wait));
        self.bounded(invocation.invoke_async::<()>(&mut connection))
            .await
    }

    /// Marks `route` dark for every replica for `for_`, with what was seen.
    pub async fn set_dark(
        &self,
        keys: &Keys,
        route: &str,
        mark: &str,
        for_: Duration,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX).max(1);
        let cmd = redis::cmd("SET")
            .arg(keys.dark(route))
            .arg(mark)
            .arg("PX")
            .arg(ms)
            .to_owned();
        self.bounded(cmd.query_async::<()>(&mut connection)).await
    }

    /// Takes the probe for `for_` unless another replica holds it; true
    /// when this one (`replica`) holds it now.
    pub async fn own_probe(
        &self,
        keys: &Keys,
        replica: &str,
        for_: Duration,
    ) -> Result<bool, StoreError> {
        let mut connection = self.connection().await?;
        let ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX).max(1);
        let cmd = redis::cmd("SET")
            .arg(keys.prober())
            .arg(replica)
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .to_owned();
        let set: Option<String> = self.bounded(cmd.query_async(&mut connection)).await?;
        if set.is_some() {
            return Ok(true);
        }
        let get = redis::cmd("GET").arg(keys.prober()).to_owned();
        let owner: Option<String> = self.bounded(get.query_async(&mut connection)).await?;
        Ok(owner.as_deref() == Some(replica))
    }

    /// What the last probe saw (`true` healthy), shared for `for_`.
    pub async fn set_probe_result(
        &self,
        keys: &Keys,
        healthy: bool,
        for_: Duration,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX).max(1);
        let cmd = redis::cmd("SET")
            .arg(keys.probe_result())
            .arg(u8::from(healthy))
            .arg("PX")
            .arg(ms)
            .to_owned();
        self.bounded(cmd.query_async::<()>(&mut connection)).await
    }

    pub async fn probe_result(&self, keys: &Keys) -> Result<Option<bool>, StoreError> {
        let mut connection = self.connection().await?;
        let cmd = redis::cmd("GET").arg(keys.probe_result()).to_owned();
        let v: Option<u8> = self.bounded(cmd.query_async(&mut connection)).await?;
        Ok(v.map(|v| v == 1))
    }
}
