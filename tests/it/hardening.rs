//! The call path against hostile answers and bad configuration:
//! each test here failed on the code before it and names the defect it pins.
//! The servers are the test's own (`recorder`), so an answer can be anything
//! a hostile or broken server could send.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::kit::recorder::Recorder;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use grag_client::policy::{ENDPOINTS, POLICY, budget, timeout};
use grag_client::types::{ChatRequest, CreateConversation, CreateKb, JobState};
use grag_client::{Config, ConversationId, Grag, JobId, KbId, SessionId, TenantId};
use sdk_runtime::CircuitState;
use sdk_runtime::alerts::CollectAlerts;
use sdk_runtime::internals::{Outcome, classify};
use sdk_runtime::{Call, ConfigError, Endpoint, Lane, OutcomeKind, Policy, ScopeNeed};
use serde_json::json;

fn tenant() -> TenantId {
    TenantId::parse("knoll").unwrap()
}

fn client(url: &str) -> Grag {
    Grag::new(Config::new(url, "key", tenant())).unwrap()
}

fn client_with(url: &str, policy: &'static Policy, alerts: Arc<CollectAlerts>) -> Grag {
    Grag::with_policy(Config::new(url, "key", tenant()).alerts(alerts), policy).unwrap()
}

/// The spec's policy with durations divided by 100, one per test binary.
fn fast() -> &'static Policy {
    static FAST: std::sync::OnceLock<&'static Policy> = std::sync::OnceLock::new();
    FAST.get_or_init(|| POLICY.scaled(100))
}

fn answer(status: u16, headers: &[(&'static str, &str)], body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).unwrap());
    }
    response
}

/// A body that never ends: `chunk` again and again.
fn endless(chunk: &'static [u8]) -> Body {
    let chunks = futures_util::stream::repeat_with(move || {
        Ok::<_, std::io::Error>(Bytes::from_static(chunk))
    });
    Body::from_stream(chunks)
}

fn kb() -> KbId {
    KbId::parse("kb-1").unwrap()
}

// ---- 1. a hostile Retry-After --------------------------------------------------

#[tokio::test]
async fn a_retry_after_that_overflows_an_instant_ends_the_call_with_its_row() {
    let huge = u64::MAX.to_string();
    let server = Recorder::start(move |r| {
        let status = if r.path.ends_with("/kbs") { 429 } else { 503 };
        answer(
            status,
            &[("retry-after", &huge)],
            r#"{"detail":"slow down"}"#,
        )
    })
    .await;
    let grag = client(&server.url());
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!((e.row(), e.class_name()), ("T11", "rate_limited"), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(u64::MAX)));
    assert_eq!(e.attempts(), 1, "no retry fits a wait past the deadline");
    let e = grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!((e.row(), e.class_name()), ("T15", "backpressure"), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(u64::MAX)));
    server.stop().await;
}

// ---- 2. redirects ----------------------------------------------------------------

#[tokio::test]
async fn a_redirect_is_never_followed_and_is_contract_drift() {
    let elsewhere = Recorder::start(|_| json!([]).to_string().into_response()).await;
    let target = elsewhere.url();
    let origin = Recorder::start(move |r| {
        let status = if r.method == "POST" { 307 } else { 302 };
        answer(status, &[("location", &format!("{target}{}", r.path))], "")
    })
    .await;
    let alerts = Arc::new(CollectAlerts::default());
    let grag = client_with(&origin.url(), &POLICY, alerts.clone());
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!(
        (e.row(), e.class_name(), e.status()),
        ("T26", "redirect", Some(302)),
        "{e}"
    );
    assert!(e.message().is_some(), "German copy for {e}");
    let body = CreateKb::new(kb(), "x");
    let e = grag.workspaces().create_kb(&body).await.unwrap_err();
    assert_eq!((e.row(), e.status()), ("T26", Some(307)), "{e}");
    assert_eq!(alerts.names(), ["contract_drift", "contract_drift"]);
    assert!(
        elsewhere.stop().await.is_empty(),
        "the other origin received the scope headers"
    );
    assert_eq!(origin.stop().await.len(), 2);
}

// ---- 3. every outcome has a row ----------------------------------------------------

#[test]
fn every_status_and_every_client_side_outcome_has_a_row_with_german_copy() {
    let endpoint = &grag_client::workspaces::LIST_KBS;
    for status in (100..=999u16).filter(|s| !(200..300).contains(s)) {
        let outcome = Outcome::Status {
            status,
            detail: None,
            retry_after: false,
        };
        let row = classify(&POLICY, endpoint, &outcome)
            .unwrap_or_else(|| panic!("status {status} has no row"));
        if !row.is_success() && row.matches.conflict.is_none() {
            assert!(
                POLICY.message(row.class).is_some(),
                "no copy for {}",
                row.class
            );
        }
    }
    for kind in sdk_runtime::policy::OutcomeKind::ALL {
        let outcome = match kind {
            sdk_runtime::policy::OutcomeKind::Status => continue,
            other => Outcome::Other(other),
        };
        let row = classify(&POLICY, endpoint, &outcome)
            .unwrap_or_else(|| panic!("{} has no row", kind.as_str()));
        assert!(
            POLICY.message(row.class).is_some(),
            "no copy for {}",
            row.class
        );
    }
}

#[tokio::test]
async fn a_status_outside_every_contract_is_classified() {
    let server = Recorder::start(|_| answer(600, &[], "")).await;
    let e = client(&server.url())
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!(
        (e.row(), e.class_name(), e.status()),
        ("T29", "unexpected_status", Some(600)),
        "{e}"
    );
    assert!(e.message().is_some());
    server.stop().await;
}

// ---- 4. size limits ------------------------------------------------------------------

#[tokio::test]
async fn an_endless_2xx_body_stops_at_the_route_cap() {
    let server = Recorder::start(|_| {
        answer(
            200,
            &[("content-type", "application/json")],
            endless(&[b' '; 64 * 1024]),
        )
    })
    .await;
    let e = client(&server.url())
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!(
        (e.row(), e.class_name(), e.kind()),
        ("T30", "response_too_large", OutcomeKind::TooLarge),
        "{e}"
    );
    let cap = grag_client::workspaces::LIST_KBS.max_response;
    assert_eq!(cap, 16 << 20, "the spec's default");
    assert!(
        e.detail().is_some_and(|d| d.contains(&cap.to_string())),
        "{e}"
    );
    assert_eq!(
        e.attempts(),
        1,
        "the same answer would come again: never retried"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_declared_length_over_the_cap_is_refused_before_the_body_is_read() {
    let gib = 1u64 << 30;
    let server = Recorder::start(move |_| {
        let mut r = answer(200, &[], endless(&[b'x'; 64 * 1024]));
        r.headers_mut().insert(header::CONTENT_LENGTH, gib.into());
        r
    })
    .await;
    let e = client(&server.url())
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T30", "{e}");
    server.stop().await;
}

/// `{"detail":"` and then `y` forever: an error body with no end.
fn endless_detail() -> Body {
    use futures_util::StreamExt;
    let head = futures_util::stream::once(async {
        Ok::<_, std::io::Error>(Bytes::from_static(b"{\"detail\":\""))
    });
    let tail = futures_util::stream::repeat_with(|| Ok(Bytes::from_static(&[b'y'; 64 * 1024])));
    Body::from_stream(head.chain(tail))
}

#[tokio::test]
async fn an_endless_detail_is_read_only_up_to_the_error_cap_and_cut() {
    let server = Recorder::start(|_| answer(404, &[], endless_detail())).await;
    let e = client(&server.url())
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T6", "{e}");
    // Never JSON: withheld behind its size, its text cut.
    let detail = e.detail().expect("a detail");
    assert!(
        detail.starts_with("not the platform's error shape"),
        "{detail}"
    );
    let text = e.server_text().expect("the text, withheld");
    assert!(text.len() <= POLICY.limits.detail, "{} bytes", text.len());
    assert!(text.ends_with("[cut]"), "marked as cut");
    assert!(
        e.to_string().len() < 2 * POLICY.limits.detail,
        "Display is bounded"
    );
    assert!(
        format!("{e:?}").len() < 2 * POLICY.limits.detail,
        "Debug is bounded"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_sse_event_that_never_ends_is_a_typed_error_at_the_event_cap() {
    let server = Recorder::start(|_| {
        answer(
            200,
            &[("content-type", "text/event-stream")],
            endless(b"data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"),
        )
    })
    .await;
    let grag = client(&server.url());
    let session = SessionId::parse("session-1").unwrap();
    let mut events = grag.bff().agent_session_stream(&session).await.unwrap();
    let e = events.next().await.expect("an item").unwrap_err();
    assert_eq!(e.kind(), OutcomeKind::Decode, "{e}");
    let cause = std::error::Error::source(&e)
        .map(|s| s.to_string())
        .unwrap_or_default();
    assert!(
        cause.contains(&POLICY.limits.sse_event.to_string()),
        "{cause}"
    );
    assert!(events.next().await.is_none(), "the stream is over");
    server.stop().await;
}

// ---- 5. the breaker never stays open without a probe loop -------------------------------

#[test]
fn a_breaker_opened_on_a_runtime_that_is_gone_still_heals() {
    let healthy = Arc::new(AtomicBool::new(false));
    let flag = healthy.clone();
    let serve = tokio::runtime::Runtime::new().unwrap();
    let server = serve.block_on(Recorder::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            json!([]).to_string().into_response()
        } else {
            answer(502, &[], "bad gateway")
        }
    }));
    let grag = client_with(&server.url(), fast(), Arc::new(CollectAlerts::default()));
    // Runtime A opens the breaker (its probe loop runs there), then is dropped.
    let a = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    a.block_on(async {
        let job = JobId::parse("job-1").unwrap();
        let _ = grag.workspaces().list_kbs().await;
        let _ = grag.workspaces().get_settings().await;
        let _ = grag.bff().pipeline_status(&job).await;
    });
    assert_eq!(grag.runtime().circuit_state(), CircuitState::Open);
    drop(a);
    healthy.store(true, Ordering::SeqCst);
    // Runtime B: the first refused call starts a new probe loop.
    let b = tokio::runtime::Runtime::new().unwrap();
    let healed = b.block_on(async {
        for _ in 0..400 {
            if grag.workspaces().list_kbs().await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    assert!(healed, "the breaker stayed open against a healthy platform");
    serve.block_on(server.stop());
}

#[test]
fn a_breaker_whose_probe_loop_dies_with_every_call_still_closes_on_a_healthy_platform() {
    // A runtime per call (a sync caller's `block_on`): a probe loop spawned by
    // a refused call dies with that call's runtime, so only the calls
    // themselves can probe. They do, on the policy's schedule (two healthy
    // probes an interval apart, then the canary): Open ends by itself.
    let healthy = Arc::new(AtomicBool::new(false));
    let flag = healthy.clone();
    let serve = tokio::runtime::Runtime::new().unwrap();
    let server = serve.block_on(Recorder::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            json!([]).to_string().into_response()
        } else {
            answer(502, &[], "bad gateway")
        }
    }));
    let grag = client_with(&server.url(), fast(), Arc::new(CollectAlerts::default()));
    let block_on = |grag: &Grag| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ok = rt.block_on(grag.workspaces().list_kbs()).is_ok();
        drop(rt);
        ok
    };
    let job = JobId::parse("job-1").unwrap();
    let opener = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    opener.block_on(async {
        let _ = grag.workspaces().list_kbs().await;
        let _ = grag.workspaces().get_settings().await;
        let _ = grag.bff().pipeline_status(&job).await;
    });
    drop(opener);
    assert_eq!(grag.runtime().circuit_state(), CircuitState::Open);
    healthy.store(true, Ordering::SeqCst);
    let mut refused = 0;
    let healed = (0..400).any(|_| {
        if block_on(&grag) {
            return true;
        }
        refused += 1;
        std::thread::sleep(Duration::from_millis(10));
        false
    });
    assert!(
        healed,
        "the breaker stayed open against a healthy platform ({refused} calls refused)"
    );
    assert_eq!(grag.runtime().circuit_state(), CircuitState::Closed);
    let seen = serve.block_on(server.stop());
    assert!(
        seen.iter().filter(|r| r.path.ends_with("/health")).count() >= 2,
        "the calls probed /health"
    );
}

// ---- 6. configuration that can never work --------------------------------------------

#[test]
fn configuration_that_can_never_work_is_refused_when_the_client_is_built() {
    let build = |url: &str, key: &str| Grag::new(Config::new(url, key, tenant())).err();
    for key in [
        "",
        "abc\r\nX-Evil: 1",
        "abc\n",
        "abc\u{7f}",
        "a b",
        "schlüssel",
    ] {
        assert!(
            matches!(
                build("http://127.0.0.1:9", key),
                Some(ConfigError::ApiKey(_))
            ),
            "key {key:?} accepted"
        );
    }
    for url in [
        "http://127.0.0.1:9/?x=1",
        "http://127.0.0.1:9/#top",
        "http://user:pw@127.0.0.1:9",
        "http://user@127.0.0.1:9",
        "ftp://127.0.0.1:9",
        "127.0.0.1:9",
        "http://",
        "http://127.0.0.1:9\n",
        "http://127.0.0.1:9/api\r\n",
        "\thttp://127.0.0.1:9",
        "http://127.0.0.1:9/a\tb",
        "http://127.0.0.1:9/\u{1b}[0m",
    ] {
        let refused = build(url, "key");
        assert!(
            matches!(&refused, Some(ConfigError::BaseUrl { url: u, .. }) if u == url),
            "{url:?}: {refused:?}"
        );
    }
    assert!(build("https://grag.example:8443/base/", "key").is_none());
    let redis = |url: &str| {
        let config = Config::new("http://127.0.0.1:9", "key", tenant()).redis_url(url);
        Grag::new(config).err()
    };
    let refused = redis("redis://127.0.0.1:6379/0\n");
    assert!(
        matches!(&refused, Some(ConfigError::Fleet(m)) if m.contains("control character")),
        "{refused:?}"
    );
}

/// A base URL with text the URL parser drops or reads otherwise (a
/// trailing space from an environment file, a `\`): the client reports the
/// base its requests go to, not the configured text. (A newline or another
/// control character is refused.)
#[tokio::test]
async fn the_reported_base_url_is_the_one_requests_go_to() {
    let server = Recorder::start(|_| json!([]).to_string().into_response()).await;
    for tail in ["/api/ ", "/api\\", "/api/"] {
        let grag = client(&format!("{}{tail}", server.url()));
        let reported = grag.runtime().base_url().to_owned();
        assert_eq!(reported, format!("{}/api", server.url()), "{tail:?}");
        grag.workspaces().list_kbs().await.unwrap();
        let sent = server.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            format!("{}{}", server.url(), sent[0].path),
            format!("{reported}/workspaces/api/v1/kbs"),
            "{tail:?}"
        );
    }
    server.stop().await;
}

// ---- 7. §3.4 cannot be bypassed -----------------------------------------------------------

#[tokio::test]
async fn a_hand_made_public_descriptor_of_a_tenant_route_is_refused() {
    static NAKED: Endpoint = Endpoint {
        scope: ScopeNeed::Public,
        ..grag_client::workspaces::LIST_KBS
    };
    let server = Recorder::start(|_| json!([]).to_string().into_response()).await;
    let grag = client(&server.url());
    let e = grag.runtime().send(Call::new(&NAKED)).await.unwrap_err();
    assert_eq!((e.row(), e.attempts()), ("T22", 0), "{e}");
    assert!(
        server.stop().await.is_empty(),
        "a request left without its tenant"
    );
}

/// The route says whether its answer is an event stream: a stream route
/// sent as a call (its events and its slots dropped with the body) is
/// refused before a byte, as a plain route opened as a stream is.
#[tokio::test]
async fn a_route_is_taken_as_its_kind_or_refused_before_a_byte() {
    let server = Recorder::start(|_| json!([]).to_string().into_response()).await;
    let grag = client(&server.url());
    let stream = Call::new(&grag_client::bff::ORCHESTRATOR_EVENTS).path("job-1");
    let e = grag.runtime().send(stream).await.unwrap_err();
    assert_eq!((e.row(), e.attempts()), ("T22", 0), "{e}");
    assert!(
        e.detail().is_some_and(|d| d.contains("is a stream route")),
        "{e}"
    );
    let plain = Call::new(&grag_client::workspaces::LIST_KBS);
    let Err(e) = grag.runtime().open_stream(plain).await else {
        panic!("a plain route opened as a stream");
    };
    assert_eq!((e.row(), e.attempts()), ("T22", 0), "{e}");
    assert!(
        e.detail().is_some_and(|d| d.contains("not a stream route")),
        "{e}"
    );
    assert!(server.stop().await.is_empty(), "a refused call was sent");
}

#[test]
fn no_override_may_change_the_scope_headers_or_the_reserved_tenants() {
    let renamed: &'static Policy = Box::leak(Box::new(Policy {
        headers: sdk_runtime::policy::HeaderNames {
            tenant: "X-Other-Tenant",
            ..POLICY.headers.clone()
        },
        ..POLICY.clone()
    }));
    let open: &'static Policy = Box::leak(Box::new(Policy {
        ids: sdk_runtime::policy::IdRules {
            reserved_tenants: &[],
            ..POLICY.ids.clone()
        },
        ..POLICY.clone()
    }));
    let routes: &'static Policy = Box::leak(Box::new(Policy {
        routes: &ENDPOINTS[1..],
        ..POLICY.clone()
    }));
    for policy in [renamed, open, routes] {
        let built = Grag::with_policy(Config::new("http://127.0.0.1:9", "key", tenant()), policy);
        assert!(
            matches!(built, Err(ConfigError::Override(_))),
            "override accepted"
        );
    }
    // Compressed time changes no scope: it is accepted.
    assert!(Grag::with_policy(Config::new("http://127.0.0.1:9", "key", tenant()), fast()).is_ok());
}

#[tokio::test]
async fn a_copy_of_the_policy_without_its_reserved_tenants_still_refuses_default() {
    // §3: `default` would be served silently. The spec's reserved list is the
    // floor of every copy of its policy, also through the runtime's own
    // constructor, which takes any policy.
    let server = Recorder::start(|_| json!([]).to_string().into_response()).await;
    let mut open = POLICY.clone();
    open.ids.reserved_tenants = &[];
    let open: &'static Policy = Box::leak(Box::new(open));
    for reserved in ["default", "system", "canary"] {
        let tenant = sdk_runtime::Id::parse(&open.ids, sdk_runtime::IdKind::Tenant, reserved)
            .expect("the copy's rules accept it");
        let config = sdk_runtime::ClientConfig::new(server.url(), "key", tenant);
        let built = sdk_runtime::Client::new(open, config);
        assert!(
            matches!(&built, Err(ConfigError::Override(what)) if what.contains("reserved tenants")),
            "{reserved}: {:?}",
            built.err()
        );
    }
    // Scaling keeps the floor, and a copy that reserves more is fine.
    assert_eq!(fast().reserved_floor, POLICY.ids.reserved_tenants);
    let mut more = POLICY.clone();
    more.ids.reserved_tenants = &["default", "system", "canary", "knoll-old"];
    let more: &'static Policy = Box::leak(Box::new(more));
    let tenant = sdk_runtime::Id::parse(&more.ids, sdk_runtime::IdKind::Tenant, "knoll").unwrap();
    let config = sdk_runtime::ClientConfig::new(server.url(), "key", tenant);
    let client = sdk_runtime::Client::new(more, config).expect("a stricter copy is accepted");
    client
        .send(Call::new(&grag_client::workspaces::LIST_KBS))
        .await
        .expect("knoll is no reserved tenant");
    let seen = server.stop().await;
    assert_eq!(seen.len(), 1, "only the stricter client sent");
}

// ---- 8. the route's retry class bounds the row's -----------------------------------------

/// A port nothing listens on: every connection is refused.
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

#[tokio::test]
async fn an_r0_route_is_never_re_sent_whatever_the_row_says() {
    let url = refused_url().await;
    // A client per route: three refused endpoints would open the breaker.
    let fresh = || client_with(&url, fast(), Arc::new(CollectAlerts::default()));
    let grag = fresh();
    // chat_stream: R0 (§4.2, a chat turn is never re-sent). Its conversation
    // is proven on a platform that is up.
    let up = Recorder::start(|_| {
        answer(
            201,
            &[("content-type", "application/json")],
            r#"{"conversation_id":"c-1"}"#,
        )
    })
    .await;
    let conversation = client(&up.url())
        .workspaces()
        .ensure_conversation(&CreateConversation::new(
            ConversationId::parse("c-1").unwrap(),
        ))
        .await
        .unwrap();
    up.stop().await;
    let chat = ChatRequest::new(ConversationId::parse("c-1").unwrap(), "hallo");
    let e = grag
        .bff()
        .chat_stream(&conversation, &chat)
        .await
        .err()
        .expect("refused");
    assert_eq!((e.row(), e.attempts()), ("T1", 1), "{e}");
    // health: R0, the probe route.
    let e = fresh().workspaces().health().await.unwrap_err();
    assert_eq!((e.row(), e.attempts()), ("T1", 1), "{e}");
    // list_kbs: R1, the row's three attempts.
    let e = fresh().workspaces().list_kbs().await.unwrap_err();
    assert_eq!((e.row(), e.attempts()), ("T1", 3), "{e}");
}

// ---- 9. open streams are requests -----------------------------------------------------------

#[tokio::test]
async fn open_streams_hold_their_slots_and_are_bounded_by_their_budget() {
    let opened = Arc::new(AtomicUsize::new(0));
    let counter = opened.clone();
    let server = Recorder::start(move |r| {
        if !r.path.contains("/orchestrator/events/") {
            return json!({"status": "running", "progress": 0.5})
                .to_string()
                .into_response();
        }
        counter.fetch_add(1, Ordering::SeqCst);
        let keepalives = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((
                Ok::<_, std::io::Error>(Bytes::from_static(b": keepalive\n\n")),
                (),
            ))
        });
        let head = futures_util::stream::once(async {
            Ok::<_, std::io::Error>(Bytes::from_static(
                b"event: subscribed\ndata: {\"job_id\":\"job-1\"}\n\n",
            ))
        });
        use futures_util::StreamExt;
        answer(
            200,
            &[("content-type", "text/event-stream")],
            Body::from_stream(head.chain(keepalives)),
        )
    })
    .await;
    let grag = client(&server.url());
    let limit = POLICY.throttle.budgets[budget::STREAMS]
        .max_in_flight
        .unwrap() as usize;
    assert_eq!(limit, 4);
    let job = JobId::parse("job-1").unwrap();
    let mut streams = Vec::new();
    for _ in 0..limit {
        // Open once its first event is in.
        let mut progress = grag.bff().orchestrator_events(&job);
        progress.next().await.unwrap().unwrap();
        streams.push(progress);
    }
    let throttle = grag.runtime().throttle();
    assert_eq!(
        throttle.in_flight(),
        limit,
        "open streams count as in flight"
    );
    assert_eq!(
        throttle.budget_in_flight(budget::STREAMS.get()),
        Some(limit)
    );
    let waiting = {
        let grag = grag.clone();
        let job = job.clone();
        tokio::spawn(async move {
            let mut progress = grag.bff().orchestrator_events(&job);
            progress.next().await.unwrap().map(|_| ())
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        opened.load(Ordering::SeqCst),
        limit,
        "a fifth stream was opened"
    );
    // Other calls still have the rest of the 8.
    let status = grag.bff().pipeline_status(&job).await.unwrap();
    assert_eq!(status.status, JobState::Running);
    streams.pop();
    waiting
        .await
        .unwrap()
        .expect("the fifth opens once one ended");
    assert_eq!(opened.load(Ordering::SeqCst), limit + 1);
    drop(streams);
    server.stop().await;
}

/// Job progress is a `futures` stream: it ends at the terminal event though
/// the body goes on, and the slot comes back then, not at drop.
#[tokio::test]
async fn job_progress_read_as_a_futures_stream_ends_at_its_terminal_event() {
    let server = Recorder::start(|_| {
        let events = futures_util::stream::once(async {
            Ok::<_, std::io::Error>(Bytes::from_static(
                b"event: subscribed\ndata: {\"job_id\":\"job-1\"}\n\n: keepalive\n\n\
                  id: 1\nevent: node_start\ndata: {\"job_id\":\"job-1\",\"node\":\"chunk\"}\n\n\
                  event: completed\ndata: {\"job_id\":\"job-1\"}\n\n",
            ))
        });
        let more = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((
                Ok::<_, std::io::Error>(Bytes::from_static(b"data: after the end\n\n")),
                (),
            ))
        });
        use futures_util::StreamExt;
        answer(
            200,
            &[("content-type", "text/event-stream")],
            Body::from_stream(events.chain(more)),
        )
    })
    .await;
    let grag = client(&server.url());
    let job = JobId::parse("job-1").unwrap();
    let mut progress = grag.bff().orchestrator_events(&job);
    use futures_util::stream::StreamExt;
    use grag_client::types::OrchestratorEvent as E;
    use sdk_runtime::{JobDone, JobUpdate};
    let first = progress.next().await.unwrap().unwrap();
    assert!(
        matches!(first, JobUpdate::Event(E::Subscribed(_))),
        "{first:?}"
    );
    assert_eq!(
        grag.runtime().throttle().in_flight(),
        1,
        "the open stream holds its slot"
    );
    let rest: Vec<_> = (&mut progress)
        .map(|item| item.expect("an update"))
        // Bounded: a stream that went on past `completed` fails, not hangs.
        .take(3)
        .collect()
        .await;
    assert!(
        matches!(
            rest.as_slice(),
            [
                JobUpdate::Event(E::NodeStart(n)),
                JobUpdate::Completed(JobDone::Event(E::Completed(_))),
            ] if n.node == "chunk"
        ),
        "{rest:?}"
    );
    assert_eq!(
        grag.runtime().throttle().in_flight(),
        0,
        "the slot is back once the job ended"
    );
    assert!(progress.next().await.is_none());
    drop(progress);
    assert_eq!(
        server.stop().await.len(),
        1,
        "no poll: the stream said it all"
    );
}

// ---- BFF lane (§2) ----------------------------------------------------------------------------

#[tokio::test]
async fn a_401_on_the_keyless_bff_lane_is_the_platform_s_not_an_auth_alert() {
    assert!(
        !POLICY
            .routes
            .iter()
            .any(|e| e.lane == Lane::Keyless && e.service != "bff")
    );
    let server =
        Recorder::start(|_| answer(401, &[], r#"{"detail":"upstream refused the key"}"#)).await;
    let alerts = Arc::new(CollectAlerts::default());
    let grag = client_with(&server.url(), &POLICY, alerts.clone());
    let e = grag
        .bff()
        .pipeline_status(&JobId::parse("job-1").unwrap())
        .await
        .unwrap_err();
    assert_eq!((e.row(), e.class_name()), ("T28", "platform_auth"), "{e}");
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!((e.row(), e.class_name()), ("T3", "auth"), "{e}");
    assert_eq!(
        alerts.names(),
        ["auth_outside_deploy"],
        "only the keyed lane raises the auth alert"
    );
    let seen = server.stop().await;
    assert_eq!(
        seen[0].header("authorization"),
        None,
        "the BFF lane sends no key"
    );
    assert!(seen[1].header("authorization").is_some());
}

#[test]
fn once_the_bff_lane_is_authenticated_t3_applies_to_it() {
    // What the generator emits for a bff route with `lanes_authenticated.bff: true`.
    let keyed = Endpoint {
        lane: Lane::Key,
        ..grag_client::bff::PIPELINE_STATUS
    };
    let outcome = Outcome::Status {
        status: 401,
        detail: None,
        retry_after: false,
    };
    assert_eq!(
        classify(&POLICY, &keyed, &outcome).map(|r| r.row),
        Some("T3")
    );
    assert_eq!(
        classify(&POLICY, &grag_client::bff::PIPELINE_STATUS, &outcome).map(|r| r.row),
        Some("T28")
    );
}

// ---- 10. the attempt line of an undecodable 2xx: in logs.rs, whose every test
// captures logs (a capture beside tests without a subscriber races tracing's
// callsite cache).

// ---- policy numbers ---------------------------------------------------------------------------

#[test]
fn the_warm_up_pair_runs_with_the_llm_budget() {
    assert_eq!(POLICY.warm_up.len(), 2);
    for warm in POLICY.warm_up {
        let class = &POLICY.timeouts[warm.timeout.expect("a timeout class")];
        assert_eq!(
            warm.timeout,
            Some(timeout::LLM),
            "{}",
            warm.endpoint.operation
        );
        assert_eq!(class.budget(true), Duration::from_secs(150), "§7.3: -m 150");
    }
}

// ---- §5.2: 502/503 feed the breaker, dark answers do not ---------------------------------------

/// A client whose every call answers 503 with `detail`.
async fn breaker_after_503s_on_three_routes(detail: &'static str) -> CircuitState {
    let body = format!(r#"{{"detail":"{detail}"}}"#);
    let server = Recorder::start(move |_| answer(503, &[], body.clone())).await;
    let grag = client(&server.url());
    let _ = grag.workspaces().list_kbs().await;
    let _ = grag.workspaces().get_settings().await;
    let _ = grag.workspaces().list_documents(&kb()).await;
    let state = grag.runtime().circuit_state();
    server.stop().await;
    state
}

#[tokio::test]
async fn three_503s_on_distinct_endpoints_open_the_breaker_but_dark_answers_do_not() {
    // T14: fail-closed safety check; T16: an unknown detail.
    assert_eq!(
        breaker_after_503s_on_three_routes("safety check failed closed").await,
        CircuitState::Open
    );
    assert_eq!(
        breaker_after_503s_on_three_routes("upstream hiccup").await,
        CircuitState::Open
    );
    // T13: a stable dark flag is one feature, not the origin (taxonomy.yaml).
    assert_eq!(
        breaker_after_503s_on_three_routes("rerank is disabled by feature flag").await,
        CircuitState::Closed
    );
}

// ---- §8: the Gutachten fan-out --------------------------------------------------------------------

#[tokio::test]
async fn the_fan_out_mode_keeps_at_most_two_documents_in_flight() {
    let sim = grag_sim::Sim::start(grag_sim::SimConfig::default())
        .await
        .unwrap();
    sim.faults().push(
        grag_sim::Rule::new(grag_sim::Fault::delay(Duration::from_millis(200))).on("list_kbs"),
    );
    let grag = client(&sim.url());
    let fanout = grag.fanout();
    let max = POLICY.throttle.budgets[budget::FANOUT].max_in_flight;
    assert_eq!(
        max,
        Some(2),
        "§8: sequential, at most 2 documents in flight"
    );
    let calls = (0..6).map(|_| async { fanout.workspaces().list_kbs().await });
    for result in futures_util::future::join_all(calls).await {
        result.unwrap();
    }
    let in_flight: Vec<usize> = sim
        .log()
        .entries()
        .iter()
        .filter(|e| e.operation == Some("list_kbs"))
        .map(|e| e.in_flight)
        .collect();
    assert_eq!(in_flight.len(), 6);
    assert_eq!(in_flight.iter().max(), Some(&2), "{in_flight:?}");
    // Without the mode the same six go out together (up to the global 8).
    let calls = (0..6).map(|_| async { grag.workspaces().list_kbs().await });
    futures_util::future::join_all(calls).await;
    let widest = sim.log().entries().iter().map(|e| e.in_flight).max();
    assert!(widest > Some(2), "{widest:?}");
    sim.stop().await;
}

// ---- numbers no other test pins: probe 3 s, canary 5 s, polling floor 2 s ----------------------

/// A body that arrives `after` the head: an answer slower than a timeout.
fn late(after: Duration, body: &'static str) -> Body {
    Body::from_stream(futures_util::stream::once(async move {
        tokio::time::sleep(after).await;
        Ok::<_, std::io::Error>(Bytes::from_static(body.as_bytes()))
    }))
}

/// Opens the breaker of a client of `policy` against a server whose health
/// and canary answers take `health` and `canary`; true if it closes within
/// `probes` probe intervals.
async fn heals(policy: &'static Policy, health: Duration, canary: Duration, probes: u32) -> bool {
    let failing = Arc::new(AtomicBool::new(true));
    let flag = failing.clone();
    let server = Recorder::start(move |r| {
        if r.path == "/workspaces/health" {
            return answer(200, &[], late(health, r#"{"status":"ok"}"#));
        }
        if flag.load(Ordering::SeqCst) {
            return answer(502, &[], "bad gateway");
        }
        answer(200, &[], late(canary, "[]"))
    })
    .await;
    let grag = client_with(&server.url(), policy, Arc::new(CollectAlerts::default()));
    let job = JobId::parse("job-1").unwrap();
    let _ = grag.workspaces().list_kbs().await;
    let _ = grag.workspaces().get_settings().await;
    let _ = grag.bff().pipeline_status(&job).await;
    assert_eq!(grag.runtime().circuit_state(), CircuitState::Open);
    failing.store(false, Ordering::SeqCst);
    let period = policy.breaker.as_ref().unwrap().probe_interval
        + policy.breaker.as_ref().unwrap().probe_timeout
        + policy.breaker.as_ref().unwrap().canary_timeout;
    let mut closed = false;
    for _ in 0..probes {
        tokio::time::sleep(period).await;
        if grag.runtime().circuit_state() == CircuitState::Closed {
            closed = true;
            break;
        }
    }
    server.stop().await;
    closed
}

#[tokio::test]
async fn a_probe_slower_than_the_probe_timeout_is_unhealthy_and_a_canary_slower_than_its_own_fails()
{
    let policy = POLICY.scaled(20);
    let b = policy.breaker.as_ref().expect("GRAG has a breaker");
    assert_eq!(
        POLICY.breaker.as_ref().unwrap().probe_timeout,
        POLICY.timeouts[timeout::PROBE].per_attempt
    );
    assert_eq!(
        POLICY.breaker.as_ref().unwrap().probe_timeout,
        Duration::from_secs(3),
        "§5.2: curl -m 3"
    );
    assert_eq!(
        POLICY.breaker.as_ref().unwrap().canary_timeout,
        Duration::from_secs(5)
    );
    let quick = Duration::ZERO;
    // Control: prompt answers heal the breaker.
    assert!(
        heals(policy, quick, quick, 20).await,
        "prompt probes and canary did not heal"
    );
    // Probes answered just after their timeout never count as healthy.
    assert!(
        !heals(policy, b.probe_timeout * 2, quick, 4).await,
        "a late probe counted"
    );
    // A canary answered after its timeout reopens instead of closing.
    assert!(
        !heals(policy, quick, b.canary_timeout * 2, 4).await,
        "a late canary closed"
    );
}

#[test]
fn polling_never_drops_below_its_floor() {
    let polling = &POLICY.throttle.polling;
    assert_eq!(polling.floor, Duration::from_secs(2), "§8");
    let eager: &'static Policy = Box::leak(Box::new(Policy {
        throttle: sdk_runtime::policy::ThrottlePolicy {
            polling: sdk_runtime::policy::PollingPolicy {
                interval: polling.floor / 4,
                ..polling.clone()
            },
            ..POLICY.throttle.clone()
        },
        ..POLICY.clone()
    }));
    let grag =
        Grag::with_policy(Config::new("http://127.0.0.1:9", "key", tenant()), eager).unwrap();
    assert_eq!(grag.runtime().poll_interval(), polling.floor);
    assert_eq!(
        client("http://127.0.0.1:9").runtime().poll_interval(),
        polling.interval
    );
}

// ---- pooled connections idle for less than the platform's keep-alive -----------------

/// A bare HTTP/1.1 server on 127.0.0.1:0 that answers every GET `[]` and
/// keeps each connection open; it counts the connections it accepted.
async fn counting_server() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n[]";
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn an_idle_pooled_connection_is_dropped_before_the_platform_s_keep_alive() {
    assert_eq!(
        POLICY.pool_idle,
        Duration::from_secs(4),
        "below uvicorn's and Node's 5 s"
    );
    let policy = POLICY.scaled(10);
    let (url, accepted) = counting_server().await;
    let grag = client_with(&url, policy, Arc::new(CollectAlerts::default()));
    grag.workspaces().list_kbs().await.unwrap();
    grag.workspaces().list_kbs().await.unwrap();
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "back to back, the connection is reused"
    );
    tokio::time::sleep(policy.pool_idle * 2).await;
    grag.workspaces().list_kbs().await.unwrap();
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a connection idle past pool_idle is not reused"
    );
}

// ---- a proxy keep-alive shorter than the pool idle -----------------------------

#[test]
fn the_pool_idle_floor_and_the_keep_alive_margin_are_the_spec_s_and_below_the_platform_s() {
    // The policy documents name no pool numbers (`inferred` in the spec); what
    // they rest on is the platform's uvicorn/Node keep-alive of 5 s.
    const PLATFORM_KEEP_ALIVE: Duration = Duration::from_secs(5);
    for policy in [&POLICY, &core_client::policy::POLICY] {
        assert_eq!(policy.pool_idle, Duration::from_secs(4), "{}", policy.api);
        assert_eq!(
            policy.pool_idle_floor,
            Duration::from_secs(1),
            "{}",
            policy.api
        );
        assert_eq!(
            policy.keep_alive_margin,
            Some(Duration::from_secs(1)),
            "{}",
            policy.api
        );
        let margin = policy.keep_alive_margin.unwrap();
        assert!(policy.pool_idle_floor <= policy.pool_idle);
        assert_eq!(
            policy.pool_idle + margin,
            PLATFORM_KEEP_ALIVE,
            "the default sits one margin below the platform's keep-alive"
        );
    }
}

#[tokio::test]
async fn a_pool_idle_below_the_floor_is_refused_and_one_above_it_is_kept() {
    let tenant = TenantId::parse("knoll").unwrap();
    let config = || Config::new("http://127.0.0.1:9", "key", tenant.clone());
    let refused = Grag::new(config().pool_idle(Duration::from_millis(999)))
        .err()
        .expect("below the floor");
    assert!(matches!(refused, ConfigError::PoolIdle(_)), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        "invalid connection pool configuration: pool_idle 999ms is below the floor of 1s"
    );
    let grag = Grag::new(config().pool_idle(Duration::from_millis(1500))).unwrap();
    assert_eq!(grag.runtime().pool_idle(), Duration::from_millis(1500));
    let grag = Grag::new(config()).unwrap();
    assert_eq!(
        grag.runtime().pool_idle(),
        POLICY.pool_idle,
        "the spec's by default"
    );
}
