//! The store suite, written once: every case runs against each store (see `suite!` in `suite.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sdk_queue::{
    Claim, Erasure, Finish, Footprint, Job, JobError, JobState, JobStore, NewJob, StoreError,
};
use serde_json::json;

use crate::kit::stores::{Harness, at};

const LEASE: Duration = Duration::from_secs(30);

fn new_job(key: &str, kind: &str) -> NewJob {
    NewJob {
        key: key.into(),
        kind: kind.into(),
        payload: json!({ "key": key, "ids": ["p-1", "p-2"] }),
    }
}

fn error(class: &str) -> JobError {
    JobError {
        class: class.into(),
        row: Some("T12".into()),
        status: Some(503),
        request_id: Some("req-1".into()),
        detail: "upstream unavailable".into(),
    }
}

async fn submit_all(s: &dyn JobStore, jobs: &[(&str, &str)]) {
    for (i, (key, kind)) in jobs.iter().enumerate() {
        s.submit(new_job(key, kind), at(i as u64)).await.unwrap();
    }
}

async fn claim(
    s: &dyn JobStore,
    owner: &str,
    kinds: &[&str],
    limit: usize,
    now_ms: u64,
) -> Vec<String> {
    let claim = Claim {
        owner,
        kinds,
        limit,
        lease: LEASE,
        now: at(now_ms),
    };
    s.claim(claim)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.key)
        .collect()
}

async fn get(s: &dyn JobStore, key: &str) -> Job {
    s.get(key).await.unwrap().expect("job exists")
}

pub async fn submit_is_idempotent(h: &impl Harness) {
    let s = h.store();
    let first = s
        .submit(new_job("upload:kb-1:doc-7", "ingest"), at(5))
        .await
        .unwrap();
    assert_eq!(first.state, JobState::Pending);
    assert_eq!(
        (first.attempts, first.created_at, first.updated_at),
        (0, at(5), at(5))
    );
    assert_eq!(first.progress, serde_json::Value::Null);
    assert_eq!(
        (
            first.last_error.as_ref(),
            first.lease.as_ref(),
            first.not_before
        ),
        (None, None, None)
    );
    assert_eq!(
        first.payload,
        new_job("upload:kb-1:doc-7", "ingest").payload
    );

    let again = NewJob {
        payload: json!("something else"),
        ..new_job("upload:kb-1:doc-7", "kg")
    };
    assert_eq!(
        s.submit(again, at(9)).await.unwrap(),
        first,
        "a second submit returns the stored job unchanged"
    );
    assert_eq!(get(&*s, "upload:kb-1:doc-7").await, first);

    let second = s
        .submit(new_job("upload:kb-1:doc-8", "ingest"), at(6))
        .await
        .unwrap();
    assert!(second.seq > first.seq, "seq follows submission order");
    assert_eq!(s.get("absent").await.unwrap(), None);
}

pub async fn claim_takes_the_oldest_of_the_kinds_asked(h: &impl Harness) {
    let s = h.store();
    submit_all(
        &*s,
        &[
            ("a1", "ingest"),
            ("b1", "kg"),
            ("a2", "ingest"),
            ("a3", "ingest"),
        ],
    )
    .await;

    let claimed = s
        .claim(Claim {
            owner: "w1",
            kinds: &["ingest"],
            limit: 2,
            lease: LEASE,
            now: at(100),
        })
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["a1", "a2"]
    );
    for j in &claimed {
        assert_eq!(
            (j.state, j.attempts, j.updated_at),
            (JobState::InFlight, 1, at(100))
        );
        let lease = j.lease.as_ref().unwrap();
        assert_eq!((lease.owner.as_str(), lease.until), ("w1", at(100) + LEASE));
        assert_eq!(
            &get(&*s, &j.key).await,
            j,
            "the claim returns the stored row"
        );
    }
    assert_eq!(claim(&*s, "w1", &["ingest"], 5, 100).await, ["a3"]);
    assert!(
        claim(&*s, "w1", &["ingest"], 5, 100).await.is_empty(),
        "in-flight jobs with a live lease stay put"
    );
    assert!(
        claim(&*s, "w1", &[], 5, 100).await.is_empty(),
        "no kinds, no jobs"
    );
    assert!(
        claim(&*s, "w1", &["kg"], 0, 100).await.is_empty(),
        "limit 0, no jobs"
    );
    assert_eq!(claim(&*s, "w2", &["kg", "other"], 5, 100).await, ["b1"]);
}

pub async fn not_before_holds_a_replay_back(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("later", "ingest"), ("now", "ingest")]).await;
    assert_eq!(claim(&*s, "w1", &["ingest"], 5, 10).await, ["later", "now"]);

    let replay = Finish::Replay {
        error: error("wal_backpressure"),
        not_before: Some(at(10_000)),
    };
    s.finish("later", "w1", replay, at(20)).await.unwrap();
    s.finish(
        "now",
        "w1",
        Finish::Replay {
            error: error("circuit_open"),
            not_before: None,
        },
        at(20),
    )
    .await
    .unwrap();

    let later = get(&*s, "later").await;
    assert_eq!(
        (later.state, later.not_before, later.lease),
        (JobState::PendingReplay, Some(at(10_000)), None)
    );
    assert_eq!(later.last_error, Some(error("wal_backpressure")));

    assert_eq!(
        claim(&*s, "w2", &["ingest"], 5, 9_999).await,
        ["now"],
        "not_before unset: at once"
    );
    assert!(
        claim(&*s, "w2", &["ingest"], 5, 9_999).await.is_empty(),
        "1 ms early"
    );
    assert_eq!(
        claim(&*s, "w2", &["ingest"], 5, 10_000).await,
        ["later"],
        "eligible at not_before"
    );
    assert_eq!(get(&*s, "later").await.attempts, 2);
}

pub async fn an_expired_lease_is_taken_over(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("j", "ingest")]).await;
    assert_eq!(claim(&*s, "w1", &["ingest"], 1, 0).await, ["j"]);
    s.checkpoint(
        "j",
        "w1",
        &json!({ "step": "converted" }),
        LEASE,
        at(10_000),
    )
    .await
    .unwrap();
    assert_eq!(
        get(&*s, "j").await.lease.unwrap().until,
        at(10_000) + LEASE,
        "a checkpoint renews the lease"
    );

    let expiry = 10_000 + LEASE.as_millis() as u64;
    assert!(
        claim(&*s, "w2", &["ingest"], 1, expiry).await.is_empty(),
        "a lease holds up to its expiry"
    );
    assert_eq!(
        s.claim_key("j", "w2", LEASE, at(expiry)).await.unwrap(),
        None
    );
    assert_eq!(
        claim(&*s, "w2", &["ingest"], 1, expiry + 1).await,
        ["j"],
        "taken over once expired"
    );

    let j = get(&*s, "j").await;
    assert_eq!(
        (
            j.state,
            j.attempts,
            j.lease.as_ref().unwrap().owner.as_str()
        ),
        (JobState::InFlight, 2, "w2")
    );
    assert_eq!(
        j.progress,
        json!({ "step": "converted" }),
        "the checkpoint survives a takeover"
    );
    assert_eq!(
        s.claim_key("j", "w3", LEASE, at(expiry + 2)).await.unwrap(),
        None,
        "held by w2 now"
    );
}

pub async fn the_old_owner_loses_the_lease(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("j", "ingest")]).await;
    assert_eq!(claim(&*s, "w1", &["ingest"], 1, 0).await, ["j"]);
    let taken = s
        .claim_key("j", "w2", LEASE, at(LEASE.as_millis() as u64 + 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.lease.unwrap().owner, "w2");

    let lost =
        |r: Result<(), StoreError>| matches!(r, Err(StoreError::LeaseLost { key }) if key == "j");
    assert!(lost(
        s.checkpoint("j", "w1", &json!(1), LEASE, at(40_000)).await
    ));
    assert!(lost(
        s.finish(
            "j",
            "w1",
            Finish::Done(serde_json::json!({"kept": true})),
            at(40_000)
        )
        .await
    ));
    assert_eq!(
        get(&*s, "j").await.progress,
        serde_json::Value::Null,
        "the old owner wrote nothing"
    );

    s.checkpoint("j", "w2", &json!(2), LEASE, at(40_000))
        .await
        .unwrap();
    s.finish(
        "j",
        "w2",
        Finish::Done(serde_json::json!({"kept": true})),
        at(41_000),
    )
    .await
    .unwrap();
    assert!(
        lost(
            s.finish(
                "j",
                "w2",
                Finish::Done(serde_json::json!({"kept": true})),
                at(42_000)
            )
            .await
        ),
        "a finished claim is over"
    );
    assert!(lost(
        s.checkpoint("j", "w2", &json!(3), LEASE, at(42_000)).await
    ));
    let absent = s
        .checkpoint("absent", "w2", &json!(3), LEASE, at(42_000))
        .await;
    assert!(matches!(absent, Err(StoreError::LeaseLost { key }) if key == "absent"));
}

pub async fn finish_sets_each_end_state(h: &impl Harness) {
    let s = h.store();
    submit_all(
        &*s,
        &[
            ("done", "ingest"),
            ("failed", "ingest"),
            ("replay", "ingest"),
        ],
    )
    .await;
    assert_eq!(claim(&*s, "w", &["ingest"], 3, 0).await.len(), 3);

    s.finish(
        "replay",
        "w",
        Finish::Replay {
            error: error("circuit_open"),
            not_before: Some(at(5)),
        },
        at(1),
    )
    .await
    .unwrap();
    let huge = JobError {
        detail: "x".repeat(100_000),
        ..error("payload_too_large")
    };
    s.finish("failed", "w", Finish::Failed(huge), at(1))
        .await
        .unwrap();
    s.finish(
        "done",
        "w",
        Finish::Done(serde_json::json!({"kept": true})),
        at(2),
    )
    .await
    .unwrap();

    let done = get(&*s, "done").await;
    assert_eq!(
        (done.state, done.lease, done.not_before, done.updated_at),
        (JobState::Done, None, None, at(2))
    );
    let failed = get(&*s, "failed").await;
    assert_eq!((failed.state, failed.lease), (JobState::Failed, None));
    let kept = failed.last_error.unwrap();
    assert_eq!(
        (kept.class.as_str(), kept.request_id.as_deref(), kept.status),
        ("payload_too_large", Some("req-1"), Some(503))
    );
    assert_eq!(
        kept.detail,
        "x".repeat(JobError::DETAIL_MAX),
        "detail is cut to 1 KiB"
    );
    assert_eq!(get(&*s, "replay").await.state, JobState::PendingReplay);

    // A replayed job that then succeeds keeps the error it met on the way, for the record.
    assert_eq!(claim(&*s, "w", &["ingest"], 3, 5).await, ["replay"]);
    s.finish(
        "replay",
        "w",
        Finish::Done(serde_json::json!({"kept": true})),
        at(6),
    )
    .await
    .unwrap();
    let replayed = get(&*s, "replay").await;
    assert_eq!(
        (replayed.state, replayed.not_before, replayed.attempts),
        (JobState::Done, None, 2)
    );
    assert_eq!(replayed.last_error, Some(error("circuit_open")));
}

pub async fn claim_key_takes_only_an_eligible_job(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("a", "ingest"), ("b", "ingest"), ("c", "ingest")]).await;
    let a = s.claim_key("a", "w", LEASE, at(10)).await.unwrap().unwrap();
    assert_eq!(
        (a.key.as_str(), a.state, a.attempts),
        ("a", JobState::InFlight, 1)
    );
    assert_eq!(a.lease.unwrap().until, at(10) + LEASE);
    assert_eq!(
        s.claim_key("a", "v", LEASE, at(11)).await.unwrap(),
        None,
        "held"
    );
    assert_eq!(
        s.claim_key("absent", "w", LEASE, at(11)).await.unwrap(),
        None
    );

    s.claim_key("b", "w", LEASE, at(10)).await.unwrap().unwrap();
    s.finish("b", "w", Finish::Failed(error("invalid")), at(11))
        .await
        .unwrap();
    s.finish(
        "a",
        "w",
        Finish::Done(serde_json::json!({"kept": true})),
        at(11),
    )
    .await
    .unwrap();
    assert_eq!(
        s.claim_key("a", "w", LEASE, at(12)).await.unwrap(),
        None,
        "done stays done"
    );
    assert_eq!(
        s.claim_key("b", "w", LEASE, at(12)).await.unwrap(),
        None,
        "failed waits for a re-upload"
    );
    assert_eq!(
        claim(&*s, "w", &["ingest"], 5, 12).await,
        ["c"],
        "claim_key took nothing else"
    );
}

pub async fn depth_counts_every_job_not_done(h: &impl Harness) {
    let s = h.store();
    assert!(s.depth().await.unwrap().is_empty());
    let keys: Vec<String> = (0..9).map(|i| format!("j{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        s.submit(
            new_job(key, if i < 6 { "ingest" } else { "kg" }),
            at(i as u64),
        )
        .await
        .unwrap();
    }
    // ingest: j0 done, j1 failed, j2 pending_replay, j3 in flight, j4 j5 pending; kg: j6 in flight, j7 j8 pending.
    for key in ["j0", "j1", "j2", "j3", "j6"] {
        s.claim_key(key, "w", LEASE, at(10)).await.unwrap().unwrap();
    }
    s.finish(
        "j0",
        "w",
        Finish::Done(serde_json::json!({"kept": true})),
        at(11),
    )
    .await
    .unwrap();
    s.finish("j1", "w", Finish::Failed(error("invalid")), at(11))
        .await
        .unwrap();
    s.finish(
        "j2",
        "w",
        Finish::Replay {
            error: error("circuit_open"),
            not_before: None,
        },
        at(11),
    )
    .await
    .unwrap();

    let mut depth = s.depth().await.unwrap();
    depth.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    let expected = [
        ("ingest", JobState::Failed, 1),
        ("ingest", JobState::InFlight, 1),
        ("ingest", JobState::Pending, 2),
        ("ingest", JobState::PendingReplay, 1),
        ("kg", JobState::InFlight, 1),
        ("kg", JobState::Pending, 2),
    ];
    assert_eq!(depth, expected.map(|(k, s, n)| (k.to_owned(), s, n)));
}

pub async fn list_gives_the_oldest_first(h: &impl Harness) {
    let s = h.store();
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        s.submit(new_job(key, "ingest"), at(i as u64))
            .await
            .unwrap();
    }
    for key in ["k1", "k4"] {
        s.claim_key(key, "w", LEASE, at(10)).await.unwrap().unwrap();
        s.finish(key, "w", Finish::Failed(error("invalid")), at(11))
            .await
            .unwrap();
    }
    let names = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.key).collect::<Vec<_>>();
    assert_eq!(
        names(s.list(JobState::Pending, 3).await.unwrap()),
        ["k0", "k2", "k3"]
    );
    assert_eq!(
        names(s.list(JobState::Pending, 100).await.unwrap()),
        ["k0", "k2", "k3", "k5"]
    );
    let failed = s.list(JobState::Failed, 10).await.unwrap();
    assert_eq!(
        failed.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["k1", "k4"]
    );
    assert!(
        failed
            .iter()
            .all(|j| j.last_error == Some(error("invalid")))
    );
    assert!(s.list(JobState::Done, 10).await.unwrap().is_empty());
    assert!(s.list(JobState::Pending, 0).await.unwrap().is_empty());
}

pub async fn corrupt_rows_are_typed_errors(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("good", "ingest"), ("bad", "ingest")]).await;

    let corrupt = |r: Result<Option<Job>, StoreError>| match r {
        Err(StoreError::Corrupt { key, field, .. }) => (key, field),
        other => panic!("expected Corrupt, got {other:?}"),
    };
    for (sql, field) in [
        (
            "UPDATE jobs SET state = 'running' WHERE key = 'bad'",
            "state",
        ),
        (
            "UPDATE jobs SET payload = '{\"unterminated' WHERE key = 'bad'",
            "payload",
        ),
        (
            "UPDATE jobs SET last_error = '{\"class\": 7}' WHERE key = 'bad'",
            "last_error",
        ),
        (
            "UPDATE jobs SET attempts = -3 WHERE key = 'bad'",
            "attempts",
        ),
        (
            "UPDATE jobs SET not_before = -1 WHERE key = 'bad'",
            "not_before",
        ),
        (
            "UPDATE jobs SET state = 'in_flight' WHERE key = 'bad'",
            "lease",
        ),
    ] {
        h.exec(&format!("UPDATE jobs SET state = 'pending', payload = '{{}}', last_error = NULL, attempts = 0, not_before = NULL WHERE key = 'bad'; {sql}")).await;
        assert_eq!(
            corrupt(s.get("bad").await),
            ("bad".to_owned(), field),
            "{sql}"
        );
        assert_eq!(get(&*s, "good").await.key, "good", "other rows still read");
    }

    h.exec("UPDATE jobs SET state = 'pending', payload = '[[[', attempts = 0 WHERE key = 'bad'")
        .await;
    let listed = s
        .list(JobState::Pending, 10)
        .await
        .expect("the listing goes on");
    let keys: Vec<&str> = listed.iter().map(|j| j.key.as_str()).collect();
    assert_eq!(keys, ["good"], "the corrupt row is left out of a listing");
    // A claim fails the corrupt row (it can never run) and goes on: one
    // damaged row does not stop the queue.
    let claimed = s
        .claim(Claim {
            owner: "w",
            kinds: &["ingest"],
            limit: 10,
            lease: LEASE,
            now: at(10),
        })
        .await
        .expect("the claim goes past the corrupt row");
    let keys: Vec<&str> = claimed.iter().map(|j| j.key.as_str()).collect();
    assert_eq!(keys, ["good"]);
    h.exec("UPDATE jobs SET payload = '{}' WHERE key = 'bad'")
        .await;
    let bad = get(&*s, "bad").await;
    assert_eq!(bad.state, JobState::Failed, "{bad:?}");
    assert_eq!(bad.lease, None);
    let why = bad.last_error.expect("the reason is kept");
    assert_eq!(why.class, "corrupt_row");
    assert!(why.detail.contains("payload"), "{why:?}");

    h.exec("UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_until = NULL WHERE key = 'good'")
        .await;
    h.exec("UPDATE jobs SET state = 'running', payload = '{}' WHERE key = 'bad'")
        .await;
    assert!(matches!(
        s.depth().await,
        Err(StoreError::Corrupt { field: "state", .. })
    ));
    assert_eq!(
        claim(&*s, "w", &["ingest"], 10, 10).await,
        ["good"],
        "a row in no known state is never claimed"
    );
}

pub async fn concurrent_claimers_never_share_a_job(h: &impl Harness) {
    const JOBS: usize = 60;
    const WORKERS: usize = 4;
    let s = h.store();
    let keys: Vec<String> = (0..JOBS).map(|i| format!("job-{i:03}")).collect();
    for (i, key) in keys.iter().enumerate() {
        s.submit(new_job(key, "ingest"), at(i as u64))
            .await
            .unwrap();
    }

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let store: Arc<dyn JobStore> = h.another().await;
        workers.push(tokio::spawn(async move {
            let owner = format!("w{w}");
            let mut mine = Vec::new();
            loop {
                let claim = Claim {
                    owner: &owner,
                    kinds: &["ingest"],
                    limit: 3,
                    lease: LEASE,
                    now: at(1_000),
                };
                let jobs = store.claim(claim).await.unwrap();
                if jobs.is_empty() {
                    return mine;
                }
                for job in jobs {
                    store
                        .checkpoint(&job.key, &owner, &json!({ "by": owner }), LEASE, at(1_000))
                        .await
                        .unwrap();
                    store
                        .finish(
                            &job.key,
                            &owner,
                            Finish::Done(serde_json::json!({"kept": true})),
                            at(1_000),
                        )
                        .await
                        .unwrap();
                    mine.push(job.key);
                }
            }
        }));
    }
    let mut times_claimed: BTreeMap<String, usize> = BTreeMap::new();
    for w in workers {
        for key in w.await.unwrap() {
            *times_claimed.entry(key).or_default() += 1;
        }
    }
    assert_eq!(times_claimed.len(), JOBS, "every job was claimed");
    assert!(
        times_claimed.values().all(|&n| n == 1),
        "no job was claimed twice: {times_claimed:?}"
    );
    for key in &keys {
        let job = get(&*s, key).await;
        assert_eq!((job.state, job.attempts), (JobState::Done, 1), "{key}");
    }
    assert!(s.depth().await.unwrap().is_empty());
}

pub async fn requeue_revives_only_a_failed_job(h: &impl Harness) {
    let s = h.store();
    submit_all(
        &*s,
        &[
            ("failed", "ingest"),
            ("done", "ingest"),
            ("pending", "ingest"),
        ],
    )
    .await;
    let claimed = claim(&*s, "w", &["ingest"], 2, 0).await;
    assert_eq!(claimed, ["failed", "done"]);
    s.finish("failed", "w", Finish::Failed(error("not_found")), at(1))
        .await
        .unwrap();
    s.finish(
        "done",
        "w",
        Finish::Done(serde_json::json!({"kept": true})),
        at(1),
    )
    .await
    .unwrap();

    assert!(s.requeue("failed", at(2)).await.unwrap());
    let revived = get(&*s, "failed").await;
    assert_eq!(
        (revived.state, revived.attempts, revived.updated_at),
        (JobState::Pending, 1, at(2))
    );
    assert_eq!(
        revived.last_error,
        Some(error("not_found")),
        "the error stays until the next run"
    );
    assert!(
        !s.requeue("done", at(2)).await.unwrap(),
        "a done job stays done"
    );
    assert!(
        !s.requeue("pending", at(2)).await.unwrap(),
        "only a failed job"
    );
    assert!(!s.requeue("missing", at(2)).await.unwrap());
    assert_eq!(get(&*s, "done").await.state, JobState::Done);
    assert_eq!(
        claim(&*s, "w", &["ingest"], 5, 3).await,
        ["failed", "pending"]
    );
}

pub async fn rerun_revives_only_a_done_job_from_the_given_checkpoint(h: &impl Harness) {
    let s = h.store();
    submit_all(&*s, &[("done", "ingest"), ("failed", "ingest")]).await;
    let claimed = claim(&*s, "w", &["ingest"], 2, 0).await;
    assert_eq!(claimed, ["done", "failed"]);
    s.checkpoint(
        "done",
        "w",
        &serde_json::json!({"step": "last"}),
        Duration::from_secs(60),
        at(1),
    )
    .await
    .unwrap();
    let kept = json!({"digest": "abc"});
    s.finish("done", "w", Finish::Done(kept.clone()), at(1))
        .await
        .unwrap();
    s.finish("failed", "w", Finish::Failed(error("not_found")), at(1))
        .await
        .unwrap();
    assert_eq!(
        get(&*s, "done").await.payload,
        kept,
        "a done job keeps only what identifies it"
    );
    assert_eq!(
        get(&*s, "failed").await.payload,
        new_job("failed", "ingest").payload,
        "a failed job keeps its content"
    );

    let start = serde_json::json!({"step": "first", "reconcile": true});
    let content = json!({"content": "again"});
    assert!(s.rerun("done", &content, &start, at(2)).await.unwrap());
    let again = get(&*s, "done").await;
    assert_eq!(
        (again.state, again.attempts, again.updated_at),
        (JobState::Pending, 1, at(2))
    );
    assert_eq!(again.progress, start, "the checkpoint the caller gave");
    assert_eq!(again.payload, content, "the content the caller gave");
    assert!(
        !s.rerun("failed", &content, &start, at(2)).await.unwrap(),
        "only a done job"
    );
    assert_eq!(
        get(&*s, "failed").await.payload,
        new_job("failed", "ingest").payload
    );
    assert!(!s.rerun("missing", &content, &start, at(2)).await.unwrap());
    assert_eq!(claim(&*s, "w", &["ingest"], 5, 3).await, ["done"]);
}

pub async fn forget_erases_a_job_in_any_state_but_one_another_holds(h: &impl Harness) {
    let s = h.store();
    let keys = [
        "pending", "held", "expired", "mine", "done", "failed", "replay",
    ];
    for key in keys {
        s.submit(new_job(key, "ingest"), at(0)).await.unwrap();
    }
    let lease = Duration::from_secs(10);
    for (key, owner) in [
        ("held", "w1"),
        ("expired", "w1"),
        ("mine", "w2"),
        ("done", "w1"),
        ("failed", "w1"),
        ("replay", "w1"),
    ] {
        s.claim_key(key, owner, lease, at(0))
            .await
            .unwrap()
            .unwrap();
    }
    s.finish("done", "w1", Finish::Done(json!({})), at(1))
        .await
        .unwrap();
    s.finish("failed", "w1", Finish::Failed(error("x")), at(1))
        .await
        .unwrap();
    let replay = Finish::Replay {
        error: error("x"),
        not_before: Some(at(99_000)),
    };
    s.finish("replay", "w1", replay, at(1)).await.unwrap();
    s.checkpoint("held", "w1", &json!(1), Duration::from_secs(60), at(5_000))
        .await
        .unwrap();

    let now = at(20_000);
    match s.forget("held", Some("w2"), now).await.unwrap() {
        Erasure::Held(l) => assert_eq!((l.owner.as_str(), l.until), ("w1", at(65_000))),
        other => panic!("a job another worker holds stays: {other:?}"),
    }
    assert_eq!(get(&*s, "held").await.state, JobState::InFlight);
    for key in ["pending", "expired", "mine", "done", "failed", "replay"] {
        assert_eq!(
            s.forget(key, Some("w2"), now).await.unwrap(),
            Erasure::Erased,
            "{key}"
        );
        assert_eq!(s.get(key).await.unwrap(), None, "{key}");
    }
    assert_eq!(
        s.forget("pending", None, now).await.unwrap(),
        Erasure::Absent
    );
    assert_eq!(
        s.forget("held", Some("w1"), now).await.unwrap(),
        Erasure::Erased
    );
    let left: Vec<_> = s.footprint().await.unwrap();
    assert!(left.is_empty(), "nothing left: {left:?}");
}

pub async fn footprint_counts_rows_and_payload_bytes_per_state(h: &impl Harness) {
    let s = h.store();
    let big = |key: &str| NewJob {
        key: key.into(),
        kind: "ingest".into(),
        payload: json!({ "content": "é".repeat(1000) }),
    };
    let content_bytes = json!({ "content": "é".repeat(1000) }).to_string().len() as u64;
    for key in ["a", "b", "c"] {
        s.submit(big(key), at(0)).await.unwrap();
    }
    s.claim_key("a", "w", Duration::from_secs(10), at(0))
        .await
        .unwrap()
        .unwrap();
    let kept = json!({"d": 1});
    s.finish("a", "w", Finish::Done(kept.clone()), at(1))
        .await
        .unwrap();
    assert_eq!(
        s.footprint().await.unwrap(),
        [
            Footprint {
                state: JobState::Done,
                rows: 1,
                payload_bytes: kept.to_string().len() as u64,
            },
            Footprint {
                state: JobState::Pending,
                rows: 2,
                payload_bytes: 2 * content_bytes,
            },
        ]
    );
}

pub async fn prune_deletes_ended_jobs_past_their_age_in_batches_and_spares_the_rest(
    h: &impl Harness,
) {
    let s = h.store();
    for i in 0..5 {
        s.submit(new_job(&format!("done-{i}"), "ingest"), at(0))
            .await
            .unwrap();
    }
    let more = [
        "done-late",
        "failed-old",
        "failed-late",
        "pending",
        "held",
        "replay",
    ];
    for key in more {
        s.submit(new_job(key, "ingest"), at(0)).await.unwrap();
    }
    for i in 0..5 {
        let key = format!("done-{i}");
        s.claim_key(&key, "w", LEASE, at(0)).await.unwrap().unwrap();
        s.finish(&key, "w", Finish::Done(json!({})), at(100))
            .await
            .unwrap();
    }
    let end = |key: &'static str, finish: Finish, ms: u64| {
        let s = s.clone();
        async move {
            s.claim_key(key, "w", LEASE, at(0)).await.unwrap().unwrap();
            s.finish(key, "w", finish, at(ms)).await.unwrap();
        }
    };
    end("done-late", Finish::Done(json!({})), 5_000).await;
    end("failed-old", Finish::Failed(error("x")), 100).await;
    end("failed-late", Finish::Failed(error("x")), 5_000).await;
    let replay = Finish::Replay {
        error: error("x"),
        not_before: None,
    };
    end("replay", replay, 100).await;
    s.claim_key("held", "w", LEASE, at(0))
        .await
        .unwrap()
        .unwrap();

    // Done jobs older than 1 s, failed ones older than 2 s: 6 rows, 4 a batch.
    let (done_before, failed_before) = (at(1_000), at(2_000));
    assert_eq!(s.prune(done_before, failed_before, 4).await.unwrap(), 4);
    assert_eq!(s.prune(done_before, failed_before, 4).await.unwrap(), 2);
    assert_eq!(s.prune(done_before, failed_before, 4).await.unwrap(), 0);
    let mut left = Vec::new();
    for key in (0..5)
        .map(|i| format!("done-{i}"))
        .chain(more.map(String::from))
    {
        if s.get(&key).await.unwrap().is_some() {
            left.push(key);
        }
    }
    assert_eq!(
        left,
        ["done-late", "failed-late", "pending", "held", "replay"]
    );
    assert_eq!(
        s.prune(at(9_000), at(1_000), 10).await.unwrap(),
        1,
        "done-late"
    );
    assert_eq!(
        s.prune(at(9_000), at(9_000), 0).await.unwrap(),
        0,
        "no batch, nothing"
    );
}
