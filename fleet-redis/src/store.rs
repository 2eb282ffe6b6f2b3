//! The fleet's shared store: Redis (its primary found by `primary`), through
//! redis-rs's connection manager (it reconnects on its own) and nine Lua scripts, each loaded once and
//! sent with EVALSHA (redis-rs loads it again on NOSCRIPT).
//!
//! Every call is bounded by the policy's deadline: an admission never waits
//! on a dead Redis longer than that. All keys of one tenant share one hash
//! tag, `{<api>:<tenant>}`, so every script runs on Redis Cluster too.
//!
//! An admission is the one call on every request's path, so its script is
//! kept to a few Redis commands: the policy's numbers are rendered into the
//! scripts' text (none is sent with each call), the tenant's pause, token
//! bucket and dark marks are fields of one hash read with one HMGET, the
//! answer is one integer, a lease that ended is given back by the next
//! admission taking its member again, and trimming is the heartbeat's.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Script, Value};
use sdk_runtime::fleet::Turn;
use tokio::sync::OnceCell;

pub use crate::error::StoreError;
use crate::primary::Primary;

/// What the admission script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Send after this wait: the leases are taken, the token and the window
    /// slots reserved for that instant.
    Go(Duration),
    /// The window slots are reserved this far ahead, and nothing else: ask
    /// again then, without the windows.
    Reserved(Duration),
    /// The window slots and the token are reserved this far ahead (a queue
    /// of waiters): ask again then, for the leases alone.
    Queued(Duration),
    /// An in-flight cap is full and nothing was taken: ask again.
    Busy(Duration),
    /// Another replica saw the route dark, for this much longer; what it
    /// saw is `mark` (see [`RedisFleet::share_dark`](crate::RedisFleet::share_dark)).
    Dark { left: Duration, mark: String },
    /// The fleet settles after its state was lost, for this much longer
    /// (prelude.lua's `run_of`): nothing taken; go on at the replica's share.
    Settle(Duration),
    /// The tenant's state is of another run than the caller's (Redis lost
    /// it, or the caller is new): nothing taken; book what was sent again
    /// ([`Store::rebook`]) and ask again with this run.
    Run(u64),
}

/// A lease set: a budget's in-flight cap, or `None`: every request's.
pub type LeaseSet = Option<usize>;

/// One admission's question to the script.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The route's templated path: its dark mark.
    pub route: &'a str,
    /// The lease member: unique among this replica's live leases (it may be
    /// that of an admission that ended: taking it again gives that back).
    pub member: &'a str,
    /// The window member: one per admission, kept across its round trips.
    pub slot: &'a str,
    /// The lease sets to take.
    pub leases: &'a [LeaseSet],
    /// The windows of the request.
    pub windows: &'a [usize],
    /// An earlier round trip reserved the window slots (`slot`).
    pub reserved: bool,
    /// A token is still to take (false once it is reserved).
    pub token: bool,
    /// The run the caller knows (0: none yet).
    pub run: u64,
    /// Redis's instant (µs) after which the caller no longer waits for the
    /// answer, so the script takes nothing (0: none).
    pub until: i64,
    /// The caller's replica came back from its share within a rate period:
    /// the bucket's burst is not free.
    pub calm: bool,
}

/// What one replica books again into a Redis that lost it ([`Store::rebook`]).
#[derive(Debug, Clone)]
pub struct Again<'a> {
    pub run: u64,
    pub replica: &'a str,
    /// The members of the leases it holds, by lease set.
    pub leases: &'a [(LeaseSet, Vec<String>)],
    /// The ages of its sends within the last window, by budget.
    pub windows: &'a [(usize, Vec<Duration>)],
}

/// What a heartbeat answered: the state's run, what the fleet sent lately
/// and the live replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Beat {
    pub run: u64,
    /// Redis's clock when it ran the heartbeat (µs), for what this replica
    /// books later.
    pub now: i64,
    /// How much longer the fleet settles after a lost state (zero: it does not).
    pub settle: Duration,
    pub recent: Recent,
    pub live: Vec<String>,
}

/// What the fleet sent lately, as Redis held it at the heartbeat: a replica
/// that goes local starts its windows from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recent {
    /// The token bucket's theoretical arrival time less Redis's now, in µs
    /// (negative: the bucket is full).
    pub tat_ahead: i64,
    /// By window (budget), its slots by age in µs (negative: reserved that
    /// far ahead).
    pub windows: Vec<(usize, Vec<i64>)>,
}

/// The policy's numbers, rendered into every script.
#[derive(Debug, Clone)]
pub struct Shape {
    pub lease: Duration,
    /// One token every `interval`...
    pub interval: Duration,
    /// ...with a burst of `burst`.
    pub burst: u32,
    /// The rolling windows' width.
    pub window: Duration,
    /// The token bucket's rate period (its rolling second).
    pub period: Duration,
    /// A window slot further ahead than this is reserved alone.
    pub horizon: Duration,
    /// A slot at most this far ahead goes with its leases (the caller
    /// sleeps the rest holding them); further ahead, it is reserved and the
    /// caller comes back for the leases.
    pub grace: Duration,
    /// The in-flight cap of every lease set.
    pub caps: Vec<(LeaseSet, u32)>,
    /// The limit of every rolling window, by budget.
    pub limits: Vec<(usize, u32)>,
    /// How long admissions wait after the state was found lost (see
    /// prelude.lua's `run_of`): every live replica books its sends again
    /// meanwhile.
    pub settle: Duration,
}

impl Shape {
    /// The Lua that defines the numbers (µs) and the caps and limits by
    /// key name. A key lives one lease longer than what it holds needs
    /// (`margin`), so that its expiry is set once a lease, not every write.
    fn constants(&self) -> String {
        let tolerance = self.interval * self.burst.saturating_sub(1);
        let mut lua = format!(
            "local lease, interval, tolerance, window, period, horizon, grace, margin, settle = \
             {}, {}, {}, {}, {}, {}, {}, {}, {}\nlocal caps = {{",
            micros(self.lease),
            micros(self.interval),
            micros(tolerance),
            micros(self.window),
            micros(self.period),
            micros(self.horizon),
            micros(self.grace),
            micros(self.lease),
            micros(self.settle),
        );
        for &(set, cap) in &self.caps {
            let _ = write!(lua, "['{}'] = {}, ", lease_name(set), cap.max(1));
        }
        lua.push_str("}\nlocal limits = {");
        for &(budget, limit) in &self.limits {
            let _ = write!(lua, "['window:{budget}'] = {}, ", limit.max(1));
        }
        lua.push_str("}\n");
        lua
    }
}

fn lease_name(set: LeaseSet) -> Cow<'static, str> {
    match set {
        Some(b) => Cow::Owned(format!("leases:{b}")),
        None => Cow::Borrowed("leases:all"),
    }
}

/// The keys of one tenant of one API, under one hash tag.
#[derive(Debug, Clone)]
pub struct Keys {
    tag: String,
    state: String,
    replicas: String,
    all: String,
}

impl Keys {
    pub fn new(api: &str, tenant: &str) -> Self {
        let tag = format!("{{{api}:{tenant}}}");
        Self {
            state: format!("{tag}:state"),
            replicas: format!("{tag}:replicas"),
            all: format!("{tag}:leases:all"),
            tag,
        }
    }

    /// The tenant's state: the pause, the token bucket, the dark marks and
    /// how long each key is known to live (see prelude.lua).
    pub fn state(&self) -> &str {
        &self.state
    }

    pub fn replicas(&self) -> &str {
        &self.replicas
    }

    /// The in-flight leases of budget `b`, or of all requests (`None`).
    pub fn leases(&self, set: LeaseSet) -> Cow<'_, str> {
        match set {
            Some(b) => Cow::Owned(format!("{}:leases:{b}", self.tag)),
            None => Cow::Borrowed(&self.all),
        }
    }

    pub fn window(&self, budget: usize) -> String {
        format!("{}:window:{budget}", self.tag)
    }

    /// Who runs the breaker's probe (or canary) now.
    pub fn owner(&self, turn: Turn) -> String {
        format!("{}:{}:owner", self.tag, turn.name())
    }

    /// What the last probe (or canary) saw.
    pub fn result(&self, turn: Turn) -> String {
        format!("{}:{}", self.tag, turn.name())
    }
}

/// A route's dark mark: its field in the state hash.
fn dark_field(route: &str) -> String {
    format!("dark:{route}")
}

/// A Redis the replicas share.
pub struct Store {
    primary: Arc<Primary>,
    /// The first connection and script load were waited for (see [`Store::ready`]).
    ready: OnceCell<()>,
    deadline: Duration,
    admit: Script,
    renew: Script,
    pause: Script,
    book: Script,
    rebook: Script,
    dark: Script,
    release: Script,
    set_result: Script,
    result: Script,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("server", &self.primary)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// How long a connection may take: a TCP and RESP handshake is more than
/// a call's deadline, once.
fn connect_timeout(deadline: Duration) -> Duration {
    deadline.max(Duration::from_millis(100))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn from_micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0).unsigned_abs())
}

/// The admission script's integer answer, `4 * wait + kind` (admit.lua).
fn answer(value: Value) -> Result<Answer, StoreError> {
    match value {
        Value::Int(n) => {
            let wait = from_micros(n >> 2);
            Ok(match n & 3 {
                0 => Answer::Go(wait),
                1 => Answer::Reserved(wait),
                2 => Answer::Queued(wait),
                _ => Answer::Busy(wait),
            })
        }
        Value::Array(items) => match items.as_slice() {
            [Value::Int(left), Value::BulkString(mark)] => Ok(Answer::Dark {
                left: from_micros(*left),
                mark: String::from_utf8_lossy(mark).into_owned(),
            }),
            [Value::Int(run)] => Ok(Answer::Run(run.unsigned_abs())),
            [Value::BulkString(kind), Value::Int(left)] if kind == b"settle" => {
                Ok(Answer::Settle(from_micros(*left)))
            }
            _ => Err(StoreError::Redis(
                "an admission answer of an unknown shape".into(),
            )),
        },
        other => Err(StoreError::Redis(format!(
            "an admission answer of an unknown shape: {other:?}"
        ))),
    }
}

/// The heartbeat's answer (renew.lua): the run, the bucket's tat less now,
/// Redis's now, the settle left,
/// each of `windows`' count and ages, then the live replicas.
fn beat(answer: Vec<String>, windows: &[usize]) -> Result<Beat, StoreError> {
    let shape = || StoreError::Redis("a heartbeat answer of an unknown shape".into());
    let mut items = answer.into_iter();
    let mut number = || -> Result<i64, StoreError> {
        items.next().and_then(|n| n.parse().ok()).ok_or_else(shape)
    };
    let run = number()?.unsigned_abs();
    let tat_ahead = number()?;
    let now = number()?;
    let settle = from_micros(number()?);
    let mut seen = Vec::with_capacity(windows.len());
    for &budget in windows {
        let n = usize::try_from(number()?).map_err(|_| shape())?;
        let ages = (0..n).map(|_| number()).collect::<Result<Vec<_>, _>>()?;
        seen.push((budget, ages));
    }
    Ok(Beat {
        run,
        now,
        settle,
        recent: Recent {
            tat_ahead,
            windows: seen,
        },
        live: items.collect(),
    })
}

impl Store {
    /// Refuses a URL redis-rs cannot use (a clear error when the client is
    /// built); connects only on the first call. `shape`'s numbers are
    /// rendered into the scripts.
    pub fn open(url: &str, deadline: Duration, shape: &Shape) -> Result<Self, String> {
        let primary = Primary::parse(url, connect_timeout(deadline))?;
        let head = format!("{}{}", shape.constants(), include_str!("prelude.lua"));
        let script = |body: &str| Script::new(&format!("{head}{body}"));
        Ok(Self {
            primary: Arc::new(primary),
            ready: OnceCell::new(),
            deadline,
            admit: script(include_str!("admit.lua")),
            renew: script(include_str!("renew.lua")),
            pause: script(include_str!("pause.lua")),
            book: script(include_str!("book.lua")),
            rebook: script(include_str!("rebook.lua")),
            dark: script(include_str!("dark.lua")),
            release: script(include_str!("release.lua")),
            set_result: Script::new(SET_RESULT),
            result: Script::new(GET_RESULT),
        })
    }
    /// The current primary's connection manager, made on the first call (it
    /// needs a runtime). It connects in the background and reconnects after
    /// a failure; a call meanwhile fails at once (or at its deadline).
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.primary.connection().await
    }

    /// How many times the primary moved (a Sentinel failover).
    pub fn moves(&self) -> u64 {
        self.primary.moves()
    }

    /// After the primary moved: a state last written through another
    /// primary loses its run (so the next script starts a new one, and the
    /// fleet books again and settles, as after an empty restart), once for
    /// the fleet, whichever replica gets here first.
    pub async fn claim(&self, keys: &Keys) -> Result<(), StoreError> {
        let Some(address) = self.primary.address() else {
            return Ok(());
        };
        let mut connection = self.connection().await?;
        let claim = redis::cmd("EVAL")
            .arg(CLAIM)
            .arg(1)
            .arg(keys.state())
            .arg(address)
            .to_owned();
        self.bounded(claim.query_async::<i64>(&mut connection))
            .await
            .map(drop)
    }

    /// `call`, answered within the deadline or failed at it. At the
    /// deadline the connection's own task may have read the answer in the
    /// same scheduler turn (this process ran late, on a loaded machine) and
    /// not handed it over yet: it runs once more before the call is given
    /// up. A timer that fired more than a deadline late says this process
    /// was not running, not that Redis was slow: [`StoreError::Late`].
    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let started = tokio::time::Instant::now();
        let mut call = std::pin::pin!(call);
        let answered = match tokio::time::timeout(self.deadline, call.as_mut()).await {
            Ok(answered) => Some(answered),
            Err(_) => {
                // Woken after the I/O driver ran: the connection's task first.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                futures_util::FutureExt::now_or_never(call.as_mut())
            }
        };
        if !matches!(answered, Some(Ok(_))) {
            self.primary.failed();
        }
        match answered {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) if e.is_connection_refusal() => Err(StoreError::Gone(e.to_string())),
            Some(Err(e)) => Err(StoreError::Redis(e.to_string())),
            None => {
                let late = started.elapsed().saturating_sub(self.deadline);
                if late > self.deadline {
                    Err(StoreError::Late(
                        self.deadline.as_millis(),
                        late.as_millis(),
                    ))
                } else {
                    Err(StoreError::Deadline(self.deadline.as_millis()))
                }
            }
        }
    }

    fn connect_timeout(&self) -> Duration {
        connect_timeout(self.deadline)
    }

    /// Waits once, for the first caller and those beside it, until the
    /// connection is up and the scripts loaded, or the connect timeout
    /// passes (a refused connection ends it at once). Without it every call
    /// of a starting process would meet the handshake within its deadline,
    /// and a reachable Redis look dead to a replica just started.
    pub async fn ready(&self) {
        self.ready
            .get_or_init(|| async {
                let _ = tokio::time::timeout(self.connect_timeout(), self.load_scripts()).await;
            })
            .await;
    }

    /// Loads the scripts (SCRIPT LOAD), so that the first admission,
    /// heartbeat or pause is one EVALSHA, not a NOSCRIPT and a reload within
    /// the deadline. Done once in the background; a script Redis forgot
    /// since (a restart) is loaded again by redis-rs on NOSCRIPT.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        for script in [
            &self.admit,
            &self.renew,
            &self.pause,
            &self.book,
            &self.rebook,
            &self.dark,
            &self.release,
            &self.set_result,
            &self.result,
        ] {
            script
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(|e| StoreError::Redis(e.to_string()))?;
        }
        Ok(())
    }

    /// One admission: one EVALSHA.
    pub async fn admit(&self, keys: &Keys, ask: &Ask<'_>) -> Result<Answer, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.admit.prepare_invoke();
        invocation.key(keys.state());
        for &set in ask.leases {
            invocation.key(keys.leases(set).as_ref());
        }
        for &budget in ask.windows {
            invocation.key(keys.window(budget));
        }
        invocation
            .arg(ask.member)
            .arg(if ask.token { "1" } else { "0" })
            .arg(dark_field(ask.route))
            .arg(ask.run)
            .arg(ask.until)
            .arg(if ask.calm { "1" } else { "0" });
        if !ask.windows.is_empty() {
            invocation
                .arg(ask.slot)
                .arg(if ask.reserved { "1" } else { "0" });
        }
        let value: Value = self
            .bounded(invocation.invoke_async(&mut connection))
            .await?;
        answer(value)
    }

    /// Books a request sent without asking (degraded) in the shared token
    /// bucket, its `leases` (until [`release`](Self::release)d or one lease
    /// passes) and the `windows` of its budgets, at `sent` (Redis time as
    /// the caller reckons it, µs; 0: Redis's now). Answers the state's run
    /// (`run`: the one the caller knows).
    pub async fn book(
        &self,
        keys: &Keys,
        member: &str,
        (run, sent): (u64, i64),
        leases: &[LeaseSet],
        windows: &[usize],
    ) -> Result<u64, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.book.key(keys.state());
        for &set in leases {
            invocation.key(keys.leases(set).as_ref());
        }
        for &budget in windows {
            invocation.key(keys.window(budget));
        }
        invocation.arg(member).arg(run).arg(sent);
        self.bounded(invocation.invoke_async(&mut connection)).await
    }

    /// Books again into `run` what this replica sent and holds, for a Redis
    /// that lost it: its held lease members by set, and each window's sends
    /// by age. Answers the
    /// state's run: another than `run`, nothing was booked.
    pub async fn rebook(&self, keys: &Keys, again: &Again<'_>) -> Result<u64, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.rebook.key(keys.state());
        invocation.arg(again.run).arg(again.replica);
        for (set, members) in again.leases {
            invocation
                .key(keys.leases(*set).as_ref())
                .arg(members.len());
            for member in members {
                invocation.arg(member);
            }
        }
        for (budget, ages) in again.windows {
            invocation.key(keys.window(*budget)).arg(ages.len());
            for age in ages {
                invocation.arg(micros(*age));
            }
        }
        self.bounded(invocation.invoke_async(&mut connection)).await
    }

    /// Ends the leases of `members` in the lease sets `sets` (a member not
    /// in a set is left alone there).
    pub async fn release(
        &self,
        keys: &Keys,
        members: &[String],
        sets: &[LeaseSet],
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.release.prepare_invoke();
        for &set in sets {
            invocation.key(keys.leases(set).as_ref());
        }
        for member in members {
            invocation.arg(member);
        }
        self.bounded(invocation.invoke_async::<()>(&mut connection))
            .await
    }

    /// The heartbeat: this replica is live for one lease, and so are the
    /// leases it holds (by lease set, every set of the fleet listed);
    /// `windows` are every window of the fleet, trimmed here. Answers the
    /// state's run (`run`: the one this replica knows), what the fleet
    /// sent lately and the live replicas.
    pub async fn renew(
        &self,
        keys: &Keys,
        replica: &str,
        run: u64,
        held: &[(LeaseSet, Vec<String>)],
        windows: &[usize],
    ) -> Result<Beat, StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.renew.prepare_invoke();
        invocation.key(keys.state()).key(keys.replicas());
        for (set, _) in held {
            invocation.key(keys.leases(*set).as_ref());
        }
        for &budget in windows {
            invocation.key(keys.window(budget));
        }
        invocation.arg(replica).arg(run);
        for (_, members) in held {
            invocation.arg(members.len());
            for member in members {
                invocation.arg(member);
            }
        }
        let answer: Vec<String> = self
            .bounded(invocation.invoke_async(&mut connection))
            .await?;
        beat(answer, windows)
    }

    /// `replica` is no longer live: out of the heartbeat's set at once.
    pub async fn leave(&self, keys: &Keys, replica: &str) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let cmd = redis::cmd("ZREM")
            .arg(keys.replicas())
            .arg(replica)
            .to_owned();
        self.bounded(cmd.query_async::<()>(&mut connection)).await
    }

    /// Pauses every replica for `wait` from now (Redis time), unless a
    /// longer pause is already set.
    pub async fn pause(&self, keys: &Keys, wait: Duration) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let mut invocation = self.pause.key(keys.state());
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
        let mut invocation = self.dark.key(keys.state());
        invocation
            .arg(dark_field(route))
            .arg(mark)
            .arg(micros(for_).max(1));
        self.bounded(invocation.invoke_async::<()>(&mut connection))
            .await
    }
    /// Takes the `turn` for `for_` unless another replica holds it; true
    /// when this one (`replica`) holds it now.
    pub async fn own(
        &self,
        keys: &Keys,
        turn: Turn,
        replica: &str,
        for_: Duration,
    ) -> Result<bool, StoreError> {
        let mut connection = self.connection().await?;
        let ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX).max(1);
        let cmd = redis::cmd("SET")
            .arg(keys.owner(turn))
            .arg(replica)
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .to_owned();
        let set: Option<String> = self.bounded(cmd.query_async(&mut connection)).await?;
        if set.is_some() {
            return Ok(true);
        }
        let get = redis::cmd("GET").arg(keys.owner(turn)).to_owned();
        let owner: Option<String> = self.bounded(get.query_async(&mut connection)).await?;
        Ok(owner.as_deref() == Some(replica))
    }

    /// What this replica's `turn` saw (`true`: healthy), shared for `for_`
    /// with the Redis time it was seen at.
    pub async fn set_result(
        &self,
        keys: &Keys,
        turn: Turn,
        healthy: bool,
        for_: Duration,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut invocation = self.set_result.key(keys.result(turn));
        invocation.arg(u8::from(healthy)).arg(ms);
        self.bounded(invocation.invoke_async::<()>(&mut connection))
            .await
    }

    /// What the last `turn` saw, if it is still fresh.
    pub async fn result(&self, keys: &Keys, turn: Turn) -> Result<Option<Seen>, StoreError> {
        let mut connection = self.connection().await?;
        let invocation = self.result.key(keys.result(turn));
        let seen: i64 = self
            .bounded(invocation.invoke_async(&mut connection))
            .await?;
        Ok(match seen {
            ..0 => None,
            0 => Some(Seen {
                healthy: false,
                age: Duration::ZERO,
            }),
            age => Some(Seen {
                healthy: true,
                age: from_micros(age - 1),
            }),
        })
    }
}

/// A shared probe or canary result: healthy (and how long ago, in Redis
/// time, it was seen) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub healthy: bool,
    pub age: Duration,
}

/// Stores a turn's result: 0 (not healthy) or the Redis time (µs) it was
/// seen healthy at. KEYS[1] the result; ARGV: 1 or 0, for how long (ms).
const SET_RESULT: &str = "local t = redis.call('TIME')
local seen = '0'
if ARGV[1] == '1' then seen = string.format('%.0f', t[1] * 1000000 + t[2]) end
redis.call('SET', KEYS[1], seen, 'PX', ARGV[2])
return 1";

/// A turn's result: -1 (none), 0 (not healthy), or 1 + its age in µs.
/// The primary's address the state was last claimed through; another one
/// drops the run (see [`Store::claim`]).
const CLAIM: &str = "if redis.call('HGET', KEYS[1], 'primary') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'primary', ARGV[1])
redis.call('HDEL', KEYS[1], 'run')
return 1";

const GET_RESULT: &str = "local seen = redis.call('GET', KEYS[1])
if not seen then return -1 end
if seen == '0' then return 0 end
local t = redis.call('TIME')
local age = t[1] * 1000000 + t[2] - seen
if age < 0 then age = 0 end
return age + 1";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_server::{RedisServer, available};

    const S: Duration = Duration::from_secs(1);

    fn shape(
        interval: Duration,
        burst: u32,
        window: Duration,
        lease: Duration,
        caps: &[(LeaseSet, u32)],
        limits: &[(usize, u32)],
    ) -> Shape {
        Shape {
            lease,
            interval,
            burst,
            window,
            period: S,
            horizon: Duration::from_millis(200),
            grace: Duration::from_millis(1),
            caps: caps.to_vec(),
            limits: limits.to_vec(),
            settle: S,
        }
    }

    /// A shape whose bucket and minute never bind: only the lease caps `caps` count.
    fn caps_only(caps: &[(LeaseSet, u32)]) -> Shape {
        shape(Duration::from_micros(1), 1_000, 60 * S, 60 * S, caps, &[])
    }

    /// A store of `shape` on `server` with a deadline generous for a loaded
    /// machine (the deadline's own test sets a short one).
    fn store(server: &RedisServer, shape: &Shape) -> Store {
        Store::open(&server.url(), Duration::from_millis(500), shape).unwrap()
    }

    /// A redis-server of this test's own, a store of `shape` on it and
    /// tenant `t1`'s keys; `None` (the suite skipped) where redis-server is
    /// not installed.
    fn started(shape: &Shape) -> Option<(RedisServer, Store, Keys)> {
        if !available("fleet store") {
            return None;
        }
        let server = RedisServer::start();
        let store = store(&server, shape);
        Some((server, store, Keys::new("api", "t1")))
    }

    async fn ask(
        store: &Store,
        keys: &Keys,
        member: &str,
        leases: &[LeaseSet],
        windows: &[usize],
    ) -> Answer {
        let ask = Ask {
            route: "/r",
            member,
            slot: member,
            leases,
            windows,
            reserved: false,
            token: true,
            run: 0,
            until: 0,
            calm: false,
        };
        admit(store, keys, ask).await
    }

    /// `ask` with the state's run, as a replica knows it (the first call of
    /// a replica new to the fleet is told the run).
    async fn admit(store: &Store, keys: &Keys, mut ask: Ask<'_>) -> Answer {
        ask.run = run_of(store, keys).await;
        loop {
            match store.admit(keys, &ask).await.unwrap() {
                Answer::Run(run) => ask.run = run,
                other => return other,
            }
        }
    }

    /// The state's run, 0 before there is one.
    async fn run_of(store: &Store, keys: &Keys) -> u64 {
        let mut connection = store.connection().await.unwrap();
        let run: Option<String> = redis::cmd("HGET")
            .arg(keys.state())
            .arg("run")
            .query_async(&mut connection)
            .await
            .unwrap();
        run.and_then(|r| r.parse::<f64>().ok())
            .map_or(0, |r| r as u64)
    }

    /// A member's score in `key`, µs of Redis time.
    async fn score(store: &Store, key: &str, member: &str) -> f64 {
        let mut connection = store.connection().await.unwrap();
        redis::cmd("ZSCORE")
            .arg(key)
            .arg(member)
            .query_async(&mut connection)
            .await
            .unwrap()
    }

    fn go(answer: &Answer) -> Duration {
        match answer {
            Answer::Go(wait) => *wait,
            other => panic!("expected go, got {other:?}"),
        }
    }

    fn between(d: Duration, lo: Duration, hi: Duration) {
        assert!(lo <= d && d <= hi, "{d:?} not in {lo:?}..={hi:?}");
    }

    async fn zcard(store: &Store, key: &str) -> usize {
        let mut connection = store.connection().await.unwrap();
        redis::cmd("ZCARD")
            .arg(key)
            .query_async(&mut connection)
            .await
            .unwrap()
    }

    const ALL: [LeaseSet; 1] = [None];

    #[tokio::test]
    async fn the_bucket_lets_a_burst_go_then_reserves_one_slot_per_interval() {
        // One token every 10 s, a burst of 3: the waits are seconds, far
        // above any machine's call time.
        let shape = shape(10 * S, 3, 60 * S, 60 * S, &[(None, 100)], &[]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        for i in 0..3 {
            let wait = go(&ask(&store, &keys, &format!("m{i}"), &ALL, &[]).await);
            assert!(wait < S, "burst call {i} waits {wait:?}");
        }
        // Then one token every interval, each reserved for its caller in
        // arrival order, who holds no lease while it waits.
        for (i, n) in [(3, 1), (4, 2), (5, 3)] {
            match ask(&store, &keys, &format!("m{i}"), &ALL, &[]).await {
                Answer::Queued(wait) => between(wait, 10 * S * n - S, 10 * S * n),
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_replica_back_from_its_share_finds_no_burst_free() {
        // One token every 10 s, a burst of 3, the bucket full: a calm
        // caller goes at once, the next one a whole interval later.
        let shape = shape(10 * S, 3, 60 * S, 60 * S, &[(None, 100)], &[]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        for (i, n) in [(0, 0), (1, 1)] {
            let calm = Ask {
                route: "/r",
                member: &format!("m{i}"),
                slot: "",
                leases: &ALL,
                windows: &[],
                reserved: false,
                token: true,
                run: 0,
                until: 0,
                calm: true,
            };
            match admit(&store, &keys, calm).await {
                Answer::Go(wait) if n == 0 => assert!(wait < S, "{wait:?}"),
                Answer::Queued(wait) => between(wait, 10 * S * n - S, 10 * S * n),
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_caller_whose_slot_is_ahead_holds_no_lease_while_it_waits() {
        // One token every 10 s, no burst: the second and third callers'
        // slots are 10 and 20 s ahead, within no grace.
        let shape = shape(10 * S, 1, 60 * S, 60 * S, &[(None, 2)], &[]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        go(&ask(&store, &keys, "a", &ALL, &[]).await);
        for (member, n) in [("b", 1), ("c", 2)] {
            match ask(&store, &keys, member, &ALL, &[]).await {
                Answer::Queued(wait) => between(wait, 10 * S * n - S, 10 * S * n),
                other => panic!("{member}: {other:?}"),
            }
        }
        // Only the caller that went holds a lease: the cap of 2 still has
        // room for a caller back for its reserved slot.
        assert_eq!(zcard(&store, &keys.leases(None)).await, 1);
        let back = Ask {
            route: "/r",
            member: "b",
            slot: "b",
            leases: &ALL,
            windows: &[],
            reserved: false,
            token: false,
            run: 0,
            until: 0,
            calm: false,
        };
        go(&admit(&store, &keys, back).await);
    }

    #[tokio::test]
    async fn a_rolling_window_admits_its_limit_then_reserves_slots_in_arrival_order() {
        let shape = shape(
            Duration::from_micros(1),
            1_000,
            600 * S,
            60 * S,
            &[(None, 100)],
            &[(2, 3)],
        );
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        let window = [2];
        let started = tokio::time::Instant::now();
        for i in 0..3 {
            let wait = go(&ask(&store, &keys, &format!("m{i}"), &ALL, &window).await);
            assert!(wait < S);
        }
        // "≤ 3 in any 600 s": the 4th and 5th are reserved one window after
        // the 1st and 2nd, the 7th one window after the 4th.
        let mut reserved = Vec::new();
        for i in 3..7 {
            match ask(&store, &keys, &format!("m{i}"), &ALL, &window).await {
                Answer::Reserved(wait) => reserved.push(tokio::time::Instant::now() + wait),
                other => panic!("call {i}: {other:?}"),
            }
        }
        let from = |at: tokio::time::Instant| at.duration_since(started);
        for at in &reserved[..3] {
            between(from(*at), 600 * S - 5 * S, 600 * S + 5 * S);
        }
        between(from(reserved[3]), 1200 * S - 5 * S, 1200 * S + 5 * S);
        // Never before an earlier reservation, in Redis time (this side's
        // reading of the waits is as late as each answer was read).
        let mut connection = store.connection().await.unwrap();
        let mut at = Vec::new();
        for i in 3..7 {
            let score: f64 = redis::cmd("ZSCORE")
                .arg(keys.window(2))
                .arg(format!("m{i}"))
                .query_async(&mut connection)
                .await
                .unwrap();
            at.push(score);
        }
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
        // A call back early for its reserved slot goes no earlier than it.
        let back = Ask {
            route: "/r",
            member: "m3",
            slot: "m3",
            leases: &ALL,
            windows: &window,
            reserved: true,
            token: true,
            run: 0,
            until: 0,
            calm: false,
        };
        match admit(&store, &keys, back).await {
            Answer::Reserved(wait) => between(wait, 600 * S - 5 * S, 600 * S),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_window_slot_counts_from_when_its_request_goes_not_from_its_reservation() {
        // 2 in any 3 s, one lease: x and y reserve their slots at the end of
        // a pause while h holds the lease, and go a second late; z, reserved
        // one window after x's reservation, must not go before one window
        // after the first of x and y went.
        let ms = Duration::from_millis;
        let window = 3 * S;
        let shape = shape(
            Duration::from_micros(1),
            1_000,
            window,
            60 * S,
            &[(None, 1)],
            &[(2, 2)],
        );
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        go(&ask(&store, &keys, "h", &ALL, &[]).await);
        store.pause(&keys, ms(300)).await.unwrap();
        let w = [2];
        let back = |member: &'static str| Ask {
            route: "/r",
            member,
            slot: member,
            leases: &ALL,
            windows: &w,
            reserved: true,
            token: true,
            run: 0,
            until: 0,
            calm: false,
        };
        let mut waits = Vec::new();
        for member in ["x", "y", "z"] {
            match ask(&store, &keys, member, &ALL, &w).await {
                Answer::Reserved(wait) => waits.push(wait),
                other => panic!("{member}: {other:?}"),
            }
        }
        let reserved_x = score(&store, &keys.window(2), "x").await;
        tokio::time::sleep(waits[1] + ms(20)).await;
        for member in ["x", "y"] {
            let busy = admit(&store, &keys, back(member)).await;
            assert!(matches!(busy, Answer::Busy(_)), "{member}: {busy:?}");
        }
        tokio::time::sleep(S).await;
        store.release(&keys, &["h".into()], &ALL).await.unwrap();
        for member in ["x", "y"] {
            go(&admit(&store, &keys, back(member)).await);
            store.release(&keys, &[member.into()], &ALL).await.unwrap();
        }
        let sent_x = score(&store, &keys.window(2), "x").await;
        assert!(
            sent_x - reserved_x >= 900_000.0,
            "x counts from its reservation"
        );
        // z back at its reserved instant: the window ending then holds x and y.
        tokio::time::sleep(waits[2].saturating_sub(S + waits[1])).await;
        let mut tries = 0;
        loop {
            match admit(&store, &keys, back("z")).await {
                Answer::Go(_) => break,
                Answer::Reserved(wait) | Answer::Busy(wait) => tokio::time::sleep(wait).await,
                other => panic!("{other:?}"),
            }
            tries += 1;
            assert!(tries < 100, "z never went");
        }
        let sent = [
            score(&store, &keys.window(2), "x").await,
            score(&store, &keys.window(2), "y").await,
        ];
        let sent_z = score(&store, &keys.window(2), "z").await;
        // 2 in any window: the window ending when z went holds at most one
        // of x and y (z goes a window after the first of them, which under
        // load went a little before the other).
        let window_us = window.as_micros() as f64;
        let within = sent.iter().filter(|at| sent_z - **at < window_us).count();
        assert!(within < 2, "z {sent_z} within a window of both {sent:?}");
    }

    #[tokio::test]
    async fn a_redis_that_restarted_empty_is_told_what_was_sent_in_the_last_window() {
        let window = 600 * S;
        let shape = shape(10 * S, 1, window, 60 * S, &[(None, 8)], &[(2, 2)]);
        let Some((mut server, store, keys)) = started(&shape) else {
            return;
        };
        let w = [2];
        go(&ask(&store, &keys, "a", &ALL, &w).await);
        let run = run_of(&store, &keys).await;
        assert!(run > 0);
        server.kill();
        server.restart();
        // A replica that knew the run is told a new one: nothing is taken,
        // and the fleet settles (at its shares) while every replica books
        // again.
        let asked = Ask {
            route: "/r",
            member: "b",
            slot: "b",
            leases: &ALL,
            windows: &w,
            reserved: false,
            token: true,
            run,
            until: 0,
            calm: false,
        };
        let new = told_run(&store, &keys, &asked).await;
        assert_ne!(new, run);
        // Booked again: two sends 1 s ago fill the window of 2 (the bucket
        // is the settle's to fill).
        let windows = [(2, vec![S, S])];
        let again = Again {
            run: new,
            replica: "r1",
            leases: &[],
            windows: &windows,
        };
        assert_eq!(store.rebook(&keys, &again).await.unwrap(), new);
        let stale = Again {
            run,
            ..again.clone()
        };
        assert_eq!(
            store.rebook(&keys, &stale).await.unwrap(),
            new,
            "not booked twice"
        );
        // The settle (1 s here) sends every admission to its share, a
        // request of no window too, and takes nothing...
        let no_window = Ask {
            member: "c",
            windows: &[],
            run: new,
            ..asked.clone()
        };
        let asked = Ask { run: new, ..asked };
        for ask in [&asked, &no_window] {
            match store.admit(&keys, ask).await.unwrap() {
                Answer::Settle(left) => between(left, S / 2, S),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(zcard(&store, &keys.leases(None)).await, 0);
        // Once it settled, the window booked again is full.
        tokio::time::sleep(S).await;
        match store.admit(&keys, &asked).await.unwrap() {
            Answer::Reserved(wait) => between(wait, window - 5 * S, window),
            other => panic!("{other:?}"),
        }
    }

    /// The run a restarted Redis tells a replica that asks with the old one.
    async fn told_run(store: &Store, keys: &Keys, asked: &Ask<'_>) -> u64 {
        for _ in 0..300 {
            match store.admit(keys, asked).await {
                Ok(Answer::Run(new)) => return new,
                Ok(other) => panic!("{other:?}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        panic!("the restarted Redis never answered")
    }

    #[tokio::test]
    async fn a_booked_request_counts_in_the_bucket_and_the_windows() {
        let shape = shape(10 * S, 1, 600 * S, 60 * S, &[(None, 8)], &[(2, 2)]);
        let Some((server, store, keys)) = started(&shape) else {
            return;
        };
        let window = [2];
        // Two sent while degraded: the window of 2 is full, the bucket's
        // next token two intervals ahead.
        store
            .book(&keys, "x1", (0, 0), &ALL, &window)
            .await
            .unwrap();
        store
            .book(&keys, "x2", (0, 0), &ALL, &window)
            .await
            .unwrap();
        match ask(&store, &keys, "a", &ALL, &window).await {
            Answer::Reserved(wait) => between(wait, 600 * S - 5 * S, 600 * S),
            other => panic!("{other:?}"),
        }
        match ask(&store, &keys, "b", &ALL, &[]).await {
            Answer::Queued(wait) => between(wait, 10 * S, 20 * S),
            other => panic!("{other:?}"),
        }
        // Their leases hold the in-flight cap until released.
        let fast = Shape {
            interval: Duration::from_micros(1),
            caps: vec![(None, 2)],
            ..shape
        };
        let fast = store_of(&server, &fast);
        let other = Keys::new("api", "t2");
        fast.book(&other, "y1", (0, 0), &ALL, &[]).await.unwrap();
        fast.book(&other, "y2", (0, 0), &ALL, &[]).await.unwrap();
        let busy = ask(&fast, &other, "c", &ALL, &[]).await;
        assert!(matches!(busy, Answer::Busy(_)), "{busy:?}");
        fast.release(&other, &["y1".into()], &ALL).await.unwrap();
        go(&ask(&fast, &other, "c", &ALL, &[]).await);
    }

    /// Redis's clock now, in µs.
    async fn redis_now(store: &Store) -> i64 {
        let mut connection = store.connection().await.unwrap();
        let (secs, us): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        secs * 1_000_000 + us
    }

    #[tokio::test]
    async fn a_booking_run_late_counts_when_it_was_sent_not_when_redis_ran_it() {
        // 1 s a token (burst 1), a window of 2 in 10 s.
        let shape = shape(S, 1, 10 * S, 60 * S, &[(None, 8)], &[(2, 2)]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        let window = [2];
        // Sent 30 s ago (it waited in a frozen Redis): outside the window
        // and every rolling second ahead, it leaves both free.
        let long_ago = redis_now(&store).await - 30_000_000;
        for member in ["x1", "x2"] {
            (store.book(&keys, member, (0, long_ago), &ALL, &window))
                .await
                .unwrap();
        }
        go(&ask(&store, &keys, "a", &ALL, &window).await);
        // Sent 8 s ago: in the window (until 2 s from now), not in the bucket.
        let keys = Keys::new("api", "t2");
        let eight_ago = redis_now(&store).await - 8_000_000;
        for member in ["y1", "y2"] {
            (store.book(&keys, member, (0, eight_ago), &ALL, &window))
                .await
                .unwrap();
        }
        go(&ask(&store, &keys, "b", &ALL, &[]).await);
        match ask(&store, &keys, "c", &ALL, &window).await {
            Answer::Reserved(wait) => between(wait, S, 2 * S),
            other => panic!("{other:?}"),
        }
    }

    fn store_of(server: &RedisServer, shape: &Shape) -> Store {
        store(server, shape)
    }

    #[tokio::test]
    async fn leases_cap_the_fleet_s_requests_and_come_back_on_release_or_expiry() {
        let lease = Duration::from_millis(300);
        let shape = shape(
            Duration::from_micros(1),
            1_000,
            60 * S,
            lease,
            &[(Some(1), 2), (None, 8)],
            &[],
        );
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        let ingest = [Some(1), None];
        go(&ask(&store, &keys, "a", &ingest, &[]).await);
        go(&ask(&store, &keys, "b", &ingest, &[]).await);
        assert!(matches!(
            ask(&store, &keys, "c", &ingest, &[]).await,
            Answer::Busy(_)
        ));
        // A call of another budget still has global slots.
        go(&ask(&store, &keys, "d", &ALL, &[]).await);
        store.release(&keys, &["a".into()], &ingest).await.unwrap();
        go(&ask(&store, &keys, "c", &ingest, &[]).await);
        assert!(matches!(
            ask(&store, &keys, "e", &ingest, &[]).await,
            Answer::Busy(_)
        ));
        // Taking an ended lease's member again ends it: "c" asks again as
        // the request after it, and the cap of 2 has room for it.
        go(&ask(&store, &keys, "c", &ingest, &[]).await);
        // Kept alive by renewals past one lease...
        for _ in 0..4 {
            tokio::time::sleep(lease / 3).await;
            let held = [(Some(1), vec!["b".to_string(), "c".to_string()])];
            let beat = store
                .renew(&keys, "replica-1", 0, &held, &[])
                .await
                .unwrap();
            assert_eq!(beat.live, ["replica-1"]);
        }
        assert!(matches!(
            ask(&store, &keys, "e", &ingest, &[]).await,
            Answer::Busy(_)
        ));
        // ...but a released one is not renewed (the beat was on its way)...
        store.release(&keys, &["b".into()], &ingest).await.unwrap();
        let held = [(Some(1), vec!["b".to_string(), "c".to_string()])];
        store
            .renew(&keys, "replica-1", 0, &held, &[])
            .await
            .unwrap();
        go(&ask(&store, &keys, "e", &ingest, &[]).await);
        // ...and they are taken back once one lease passes without one (a crash).
        tokio::time::sleep(lease + Duration::from_millis(50)).await;
        go(&ask(&store, &keys, "f", &ingest, &[]).await);
        go(&ask(&store, &keys, "g", &ingest, &[]).await);
        let beat = store.renew(&keys, "replica-2", 0, &[], &[]).await.unwrap();
        assert_eq!(beat.live, ["replica-2"], "replica-1 stopped beating");
    }

    #[tokio::test]
    async fn a_heartbeat_tells_the_bucket_and_the_window_slots() {
        // 10 tokens a second, a burst of 8; 5 retrieval calls a minute.
        let shape = shape(S / 10, 8, 60 * S, 60 * S, &[(None, 8)], &[(2, 5)]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        let (sets, windows) = ([None], [2]);
        for member in ["r1:1", "r2:1", "r2:2"] {
            go(&ask(&store, &keys, member, &sets, &windows).await);
        }
        let held = [(None, Vec::new())];
        let beat = store.renew(&keys, "r1", 0, &held, &windows).await.unwrap();
        // Three tokens taken at once: the bucket is three tenths ahead of
        // when they were taken.
        assert!(
            (100_000..=300_000).contains(&beat.recent.tat_ahead),
            "{beat:?}"
        );
        // The three slots, sent a moment ago.
        let [(2, ages)] = beat.recent.windows.as_slice() else {
            panic!("{beat:?}");
        };
        assert_eq!(ages.len(), 3, "{beat:?}");
        assert!(
            ages.iter().all(|age| (0..1_000_000).contains(age)),
            "{ages:?}"
        );
        assert_eq!(beat.live, ["r1"]);
    }

    #[tokio::test]
    async fn every_key_expires_even_one_emptied_and_made_again() {
        // Short leases and windows: the heartbeat's trimming empties (and
        // so deletes) the sets, the next admission makes them again.
        let ms = Duration::from_millis;
        let shape = shape(
            ms(1),
            1,
            ms(300),
            ms(300),
            &[(Some(1), 2), (None, 8)],
            &[(2, 5)],
        );
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        let (sets, windows) = ([Some(1), None], [2]);
        let held = [(Some(1), Vec::new()), (None, Vec::new())];
        let mut connection = store.connection().await.unwrap();
        for round in 0..3 {
            go(&ask(&store, &keys, &format!("a{round}"), &sets, &windows).await);
            store
                .book(&keys, &format!("b{round}"), (0, 0), &sets, &windows)
                .await
                .unwrap();
            store.pause(&keys, ms(1)).await.unwrap();
            store
                .set_dark(&keys, "/dark", "7 503", ms(1))
                .await
                .unwrap();
            let members = [format!("a{round}"), format!("b{round}")];
            store.release(&keys, &members, &sets).await.unwrap();
            let found: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut connection)
                .await
                .unwrap();
            assert!(found.len() >= 4, "{found:?}");
            for key in found {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                assert!(ttl > 0, "round {round}: {key} has no expiry ({ttl})");
            }
            // Everything ended: the beat trims the sets away.
            tokio::time::sleep(ms(400)).await;
            store.renew(&keys, "r1", 0, &held, &windows).await.unwrap();
            assert_eq!(zcard(&store, &keys.leases(None)).await, 0);
            assert_eq!(zcard(&store, &keys.window(2)).await, 0);
        }
    }

    #[tokio::test]
    async fn a_pause_holds_every_admission_until_its_latest_instant() {
        let shape = caps_only(&[(None, 1)]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        store.pause(&keys, 20 * S).await.unwrap();
        store.pause(&keys, 5 * S).await.unwrap();
        match ask(&store, &keys, "a", &ALL, &[]).await {
            Answer::Reserved(wait) => between(wait, 19 * S, 20 * S),
            other => panic!("{other:?}"),
        }
        // Nothing was taken while paused: the cap of 1 is still free.
        assert_eq!(zcard(&store, &keys.leases(None)).await, 0);
    }

    #[tokio::test]
    async fn a_dark_mark_answers_before_anything_is_taken() {
        let shape = caps_only(&[(None, 1)]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        store.set_dark(&keys, "/r", "7 503", 30 * S).await.unwrap();
        match ask(&store, &keys, "a", &ALL, &[]).await {
            Answer::Dark { left, mark } => {
                between(left, 29 * S, 30 * S);
                assert_eq!(mark, "7 503");
            }
            other => panic!("{other:?}"),
        }
        let ask_other = Ask {
            route: "/other",
            member: "b",
            slot: "b",
            leases: &ALL,
            windows: &[],
            reserved: false,
            token: true,
            run: 0,
            until: 0,
            calm: false,
        };
        go(&admit(&store, &keys, ask_other).await);
    }

    #[tokio::test]
    async fn a_flushed_script_is_loaded_again_and_one_replica_holds_each_turn() {
        let shape = caps_only(&[(None, 8)]);
        let Some((_server, store, keys)) = started(&shape) else {
            return;
        };
        go(&ask(&store, &keys, "a", &ALL, &[]).await);
        let mut connection = store.connection().await.unwrap();
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async::<()>(&mut connection)
            .await
            .unwrap();
        // NOSCRIPT: redis-rs loads it again and sends it once more.
        go(&ask(&store, &keys, "b", &ALL, &[]).await);
        for turn in [Turn::Probe, Turn::Canary] {
            assert!(store.own(&keys, turn, "r1", 30 * S).await.unwrap());
            assert!(!store.own(&keys, turn, "r2", 30 * S).await.unwrap());
            assert!(store.own(&keys, turn, "r1", 30 * S).await.unwrap());
            assert_eq!(store.result(&keys, turn).await.unwrap(), None);
            store.set_result(&keys, turn, false, 30 * S).await.unwrap();
            let seen = store.result(&keys, turn).await.unwrap();
            assert_eq!(seen.map(|s| s.healthy), Some(false));
            store.set_result(&keys, turn, true, 30 * S).await.unwrap();
            let seen = store.result(&keys, turn).await.unwrap().unwrap();
            assert!(seen.healthy);
            assert!(seen.age < S, "seen {:?} ago", seen.age);
        }
        // The two turns are held apart: r2 may hold the canary of a fleet
        // whose probe r1 holds.
        let other = Keys::new("api", "t2");
        assert!(store.own(&other, Turn::Probe, "r1", 30 * S).await.unwrap());
        assert!(store.own(&other, Turn::Canary, "r2", 30 * S).await.unwrap());
    }

    #[tokio::test]
    async fn a_killed_redis_fails_each_call_within_its_deadline_and_is_used_again_once_back() {
        if !available("fleet store") {
            return;
        }
        let mut server = RedisServer::start();
        let deadline = Duration::from_millis(5);
        let shape = caps_only(&[(None, 100)]);
        let store = Store::open(&server.url(), deadline, &shape).unwrap();
        let keys = Keys::new("api", "t1");
        let ask = Ask {
            route: "/r",
            member: "a",
            slot: "a",
            leases: &ALL,
            windows: &[],
            reserved: false,
            token: true,
            run: 0,
            until: 0,
            calm: false,
        };
        // The first call connects; a loaded machine may need more than 5 ms.
        let mut up = false;
        for _ in 0..200 {
            if store.admit(&keys, &ask).await.is_ok() {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(up, "the store never answered");
        server.kill();
        for _ in 0..20 {
            let started = tokio::time::Instant::now();
            let result = store.admit(&keys, &ask).await;
            assert!(result.is_err(), "a dead Redis answered");
            // The deadline bounds every call; the slack is the scheduler's.
            assert!(
                started.elapsed() < deadline + Duration::from_millis(100),
                "waited {:?}",
                started.elapsed()
            );
        }
        server.restart();
        let mut back = false;
        for _ in 0..300 {
            if store.admit(&keys, &ask).await.is_ok() {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(back, "the store was not used again after Redis came back");
    }
}
