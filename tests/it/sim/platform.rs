//! The platform's behaviour, route by route, over real HTTP on loopback.

use crate::kit::document::{TEXT, b64};
use crate::kit::sim::{self as kit, client, raw, scoped, sim};
use grag_client::policy::ENDPOINTS;
use grag_client::types::{
    ChatMessage, ChatRole, Chunk, CompletionRequest, ConversionState, ConvertRequest,
    CreateConversation, CreateKb, Edge, Entity, LinkRequest, Point, ScoreRequest, SearchRequest,
    SpendGrouping, UploadDocument, UpsertPoints,
};
use grag_client::{
    ConversationId, Created, DocumentId, EdgeId, EntityId, KbId, Progress, WorkspaceId,
};
use grag_sim::embedded::{self, KEY};
use reqwest::Method;
use serde_json::{Value, json};

fn kb(id: &str) -> CreateKb {
    CreateKb::new(KbId::parse(id).unwrap(), format!("KB {id}"))
}

fn upload(id: &str, text: &str) -> UploadDocument {
    UploadDocument::new(
        DocumentId::parse(id).unwrap(),
        format!("{id}.txt"),
        "text/plain",
        b64(text),
    )
}

fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| if s.starts_with('{') { "x-1" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_route_of_the_client_is_served_and_carries_a_request_id() {
    let sim = sim().await;
    let http = raw();
    for endpoint in ENDPOINTS.iter() {
        let method = Method::from_bytes(endpoint.method.as_str().as_bytes()).unwrap();
        let url = format!("{}{}", sim.url(), concrete(endpoint.path));
        let mut request = scoped(&http, method.clone(), url).header("X-Workspace-ID", "ws-1");
        if method != Method::GET {
            request = request.json(&json!({}));
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        assert!(
            ![405, 501].contains(&status),
            "{} answered {status}",
            endpoint.operation
        );
        assert!(
            response.headers().contains_key("x-request-id"),
            "{} has no X-Request-ID",
            endpoint.operation
        );
    }
    assert_eq!(sim.log().len(), ENDPOINTS.len());
    assert!(sim.log().entries().iter().all(|e| e.operation.is_some()));
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let sim = sim().await;
    let http = raw();
    let url = format!("{}/workspaces/api/v1/kbs", sim.url());
    let echoed = scoped(&http, Method::GET, url.clone())
        .header("X-Request-ID", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "abc-123");
    let generated = scoped(&http, Method::GET, url).send().await.unwrap();
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let missing = http
        .get(format!("{}/no/such/route", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.headers().contains_key("x-request-id"));
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body, json!({ "detail": "Not Found" }));
}

#[tokio::test]
async fn health_is_public() {
    let sim = sim().await;
    let response = raw()
        .get(format!("{}/workspaces/health", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "status": "ok" })
    );
    // The spec's own timeouts: what is tested is the missing key, not speed.
    let health = embedded::client(&sim, "knoll", &grag_client::policy::POLICY)
        .workspaces()
        .health()
        .await
        .unwrap();
    assert_eq!(health.status, "ok");
    let logged = &sim.log().of("health")[1];
    assert!(logged.header("authorization").is_none());
    assert!(logged.header("x-tenant-id").is_none());
}

#[tokio::test]
async fn a_request_without_tenant_is_served_as_tenant_default() {
    let sim = sim().await;
    let http = raw();
    // The hazard: no X-Tenant-ID, and the write still succeeds...
    let response = http
        .post(format!("{}/workspaces/api/v1/kbs", sim.url()))
        .bearer_auth(KEY)
        .json(&kb("kb-orphan"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    // ...in tenant default, invisible to tenant knoll.
    assert_eq!(sim.kbs("default").len(), 1);
    assert!(sim.kbs("knoll").is_empty());
    assert_eq!(sim.log().entries()[0].tenant.as_deref(), Some("default"));
    let knoll = client(&sim, "knoll");
    assert!(knoll.workspaces().list_kbs().await.unwrap().is_empty());
    // The client never lets that happen: every scoped request it sent named its tenant.
    knoll.workspaces().create_kb(&kb("kb-1")).await.unwrap();
    knoll.ledger().spend(&SpendGrouping::Service).await.unwrap();
    let from_client: Vec<_> = sim.log().entries().into_iter().skip(1).collect();
    assert!(!from_client.is_empty());
    for e in from_client {
        assert_eq!(e.header("x-tenant-id"), Some("knoll"), "{}", e.path);
        assert_eq!(e.tenant.as_deref(), Some("knoll"));
    }
    assert_eq!(sim.tenants(), ["default", "knoll"]);
}

#[tokio::test]
async fn another_tenants_things_are_404_never_403() {
    let sim = sim().await;
    let knoll = client(&sim, "knoll");
    let other = client(&sim, "other");
    knoll.workspaces().create_kb(&kb("kb-1")).await.unwrap();
    let kb_id = KbId::parse("kb-1").unwrap();
    knoll
        .workspaces()
        .upload_document(&kb_id, &upload("doc-1", TEXT))
        .await
        .unwrap();
    let ws = WorkspaceId::parse("ws-1").unwrap();
    let entity_id = EntityId::parse("e-1").unwrap();
    let entity = Entity::new(entity_id.clone(), "Bauwerk", "Brücke");
    knoll
        .kg(&ws)
        .upsert_entity(&entity_id, &entity)
        .await
        .unwrap();

    let e = other.workspaces().list_documents(&kb_id).await.unwrap_err();
    assert_eq!((e.status(), e.row()), (Some(404), "T6"));
    let e = other.kg(&ws).get_entity(&entity_id).await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    let job = grag_client::JobId::parse("doc-1").unwrap();
    let e = other.bff().pipeline_status(&job).await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    let search = SearchRequest::new("Brücke", 3);
    let e = other
        .ai_gateway(&embedded::pipeline())
        .search_rerank(&kb_id, &search)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404));
    assert!(other.workspaces().list_kbs().await.unwrap().is_empty());
    assert!(sim.log().entries().iter().all(|e| e.status != Some(403)));
}

#[tokio::test]
async fn key_lane_routes_need_a_bearer_key_and_the_bff_lane_does_not() {
    let sim = sim().await;
    let http = raw();
    let response = http
        .get(format!("{}/workspaces/api/v1/kbs", sim.url()))
        .header("X-Tenant-ID", "knoll")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "detail": "Not authenticated" })
    );
    let bff = http
        .get(format!("{}/next/api/pipeline/status/nope", sim.url()))
        .header("X-Tenant-ID", "knoll")
        .send()
        .await
        .unwrap();
    assert_eq!(bff.status(), 404, "unauthenticated BFF lane, unknown job");

    let strict = embedded::start(kit::config().with_api_key("right")).await;
    let wrong = client(&strict, "knoll")
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!((wrong.status(), wrong.row()), (Some(401), "T3"));
}

#[tokio::test]
async fn kg_service_and_entity_linking_need_a_workspace() {
    let sim = sim().await;
    let http = raw();
    for (method, path, body) in [
        (
            Method::PUT,
            "/kg-service/api/v1/entities/e-1",
            json!({ "entity_id": "e-1", "entity_type": "x", "name": "x" }),
        ),
        (Method::GET, "/kg-service/api/v1/entities/e-1", Value::Null),
        (
            Method::GET,
            "/kg-service/api/v1/entities/e-1/edges",
            Value::Null,
        ),
        (
            Method::POST,
            "/entity-linking/api/v1/link",
            json!({ "text": "x" }),
        ),
    ] {
        let mut request = scoped(&http, method, format!("{}{path}", sim.url()));
        if !body.is_null() {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["detail"], "X-Workspace-ID header is required");
    }

    // With the typed client the workspace is part of the handle.
    let grag = client(&sim, "knoll");
    let ws = WorkspaceId::parse("ws-1").unwrap();
    let kg = grag.kg(&ws);
    let bruecke = EntityId::parse("e-bruecke").unwrap();
    let din = EntityId::parse("e-din").unwrap();
    for (id, name) in [(&bruecke, "Brücke"), (&din, "DIN 1076")] {
        let entity = Entity::new(id.clone(), "Begriff", name).with_properties(json!({ "a": 1 }));
        kg.upsert_entity(id, &entity).await.unwrap();
    }
    // MERGE: a second upsert keeps what it does not overwrite.
    let merged = kg
        .upsert_entity(
            &bruecke,
            &Entity::new(bruecke.clone(), "Bauwerk", "Brücke").with_properties(json!({ "b": 2 })),
        )
        .await
        .unwrap();
    assert_eq!(merged.properties, Some(json!({ "a": 1, "b": 2 })));
    assert_eq!(
        kg.get_entity(&bruecke).await.unwrap().entity_type,
        "Bauwerk"
    );
    let edge_id = EdgeId::parse("edge-1").unwrap();
    let edge = Edge::new(
        edge_id.clone(),
        bruecke.clone(),
        din.clone(),
        "geprueft_nach",
    );
    kg.upsert_edge(&edge_id, &edge).await.unwrap();
    assert_eq!(kg.list_edges(&din).await.unwrap(), vec![edge]);
    let links = grag
        .entity_linking(&ws)
        .link(&LinkRequest::new("Die Brücke wird nach DIN 1076 geprüft."))
        .await
        .unwrap();
    let found: Vec<_> = links
        .iter()
        .map(|l| (l.entity_id.as_str(), l.mention.as_str(), l.start))
        .collect();
    assert_eq!(
        found,
        [("e-bruecke", "Brücke", 4), ("e-din", "DIN 1076", 21)]
    );
    // Workspaces are separate graphs.
    let other_ws = WorkspaceId::parse("ws-2").unwrap();
    let e = grag.kg(&other_ws).get_entity(&bruecke).await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    assert!(sim.entity("knoll", "ws-1", "e-din").is_some());
}

#[tokio::test]
async fn recreating_a_kb_document_or_conversation_is_409_which_the_client_calls_existing() {
    let sim = sim().await;
    let grag = client(&sim, "knoll");
    let ws = grag.workspaces();
    assert!(ws.create_kb(&kb("kb-1")).await.unwrap().is_new());
    assert_eq!(ws.create_kb(&kb("kb-1")).await.unwrap(), Created::Existing);
    let kb_id = KbId::parse("kb-1").unwrap();
    assert!(
        ws.upload_document(&kb_id, &upload("doc-1", TEXT))
            .await
            .unwrap()
            .is_new()
    );
    assert_eq!(
        ws.upload_document(&kb_id, &upload("doc-1", TEXT))
            .await
            .unwrap(),
        Created::Existing
    );
    let conversation = CreateConversation::new(ConversationId::parse("conv-1").unwrap());
    assert!(
        ws.create_conversation(&conversation)
            .await
            .unwrap()
            .is_new()
    );
    assert_eq!(
        ws.create_conversation(&conversation).await.unwrap(),
        Created::Existing
    );
    let statuses: Vec<_> = sim.log().entries().iter().map(|e| e.status).collect();
    assert_eq!(statuses, [201, 409, 201, 409, 201, 409].map(Some).to_vec());
    // Uploading into a KB that does not exist is a 404.
    let missing = KbId::parse("kb-missing").unwrap();
    let e = ws
        .upload_document(&missing, &upload("doc-2", TEXT))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404));
}

#[tokio::test]
async fn docfold_answers_409_while_converting() {
    let mut config = kit::config();
    // Converting until the test finishes it, however slow the machine.
    config.conversion_time = std::time::Duration::from_secs(3600);
    let sim = embedded::start(config).await;
    let docfold = client(&sim, "knoll");
    let docfold = docfold.docfold();
    let job = docfold
        .convert(&ConvertRequest::new(
            DocumentId::parse("doc-1").unwrap(),
            "a.txt",
            "text/plain",
            b64(TEXT),
        ))
        .await
        .unwrap();
    assert_eq!(job.status, ConversionState::Processing);
    assert_eq!(
        docfold.result(&job.conversion_id).await.unwrap(),
        Progress::Processing
    );
    assert_eq!(sim.log().of("result")[0].status, Some(409));
    assert!(sim.finish_conversion("knoll", job.conversion_id.as_str()));
    assert!(!sim.finish_conversion("other", job.conversion_id.as_str()));
    let Progress::Ready(result) = docfold.result(&job.conversion_id).await.unwrap() else {
        panic!("the conversion has finished");
    };
    assert_eq!(result.content.as_deref(), Some(TEXT));
}

#[tokio::test]
async fn voyager_refuses_more_than_256_points_with_413() {
    let sim = sim().await;
    let grag = client(&sim, "knoll");
    grag.workspaces().create_kb(&kb("kb-1")).await.unwrap();
    let kb_id = KbId::parse("kb-1").unwrap();
    let points = |n: usize| {
        UpsertPoints::new(
            (0..n)
                .map(|i| {
                    Point::new(format!("p-{i}"), vec![0.1, 0.2])
                        .with_payload(json!({ "text": format!("Punkt {i} Standsicherheit") }))
                })
                .collect::<Vec<_>>(),
        )
    };
    let ok = grag
        .voyager()
        .upsert_points(&kb_id, &points(256))
        .await
        .unwrap();
    assert_eq!(ok.upserted, Some(256));
    let e = grag
        .voyager()
        .upsert_points(&kb_id, &points(257))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.row(), e.class_name()),
        (Some(413), "T9", "payload_too_large")
    );
    assert_eq!(sim.log().count("upsert_points"), 2, "a 413 is not retried");
    // Points with a text payload are searchable right away.
    let hits = grag
        .ai_gateway(&embedded::pipeline())
        .search_rerank(&kb_id, &SearchRequest::new("Standsicherheit", 3))
        .await
        .unwrap();
    assert_eq!(hits.results.len(), 3);
}

#[tokio::test]
async fn a_body_that_does_not_validate_is_422() {
    let sim = sim().await;
    let http = raw();
    for (path, body) in [
        ("/workspaces/api/v1/kbs", json!({ "name": "no id" })),
        (
            "/workspaces/api/v1/kbs",
            json!({ "kb_id": "Not A Label", "name": "x" }),
        ),
        ("/workspaces/api/v1/conversations", json!([])),
        (
            "/ai-gateway/api/v1/llm/completions",
            json!({ "messages": "not a list" }),
        ),
        (
            "/ai-gateway/api/v1/llm/completions",
            json!({ "messages": [{ "role": "robot", "content": "hi" }] }),
        ),
    ] {
        let response = scoped(&http, Method::POST, format!("{}{path}", sim.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{path} {body}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["detail"].is_array(),
            "FastAPI's list of errors: {body}"
        );
    }
    let garbage = scoped(
        &http,
        Method::POST,
        format!("{}/workspaces/api/v1/kbs", sim.url()),
    )
    .body("not json")
    .send()
    .await
    .unwrap();
    assert_eq!(garbage.status(), 422);
}

#[tokio::test]
async fn settings_are_per_tenant() {
    let sim = sim().await;
    let knoll = client(&sim, "knoll");
    assert_eq!(knoll.workspaces().get_settings().await.unwrap(), json!({}));
    let settings = json!({ "language": "de", "retrieval": { "top_k": 8 } });
    assert_eq!(
        knoll.workspaces().put_settings(&settings).await.unwrap(),
        settings
    );
    assert_eq!(knoll.workspaces().get_settings().await.unwrap(), settings);
    assert_eq!(
        client(&sim, "other")
            .workspaces()
            .get_settings()
            .await
            .unwrap(),
        json!({})
    );
    assert_eq!(sim.settings("knoll"), Some(settings));
}

#[tokio::test]
async fn search_completion_and_groundedness() {
    // The ingest job waits until the test starts it.
    let sim = embedded::start(kit::config().with_held_jobs()).await;
    let grag = client(&sim, "knoll");
    grag.workspaces().create_kb(&kb("kb-1")).await.unwrap();
    let kb_id = KbId::parse("kb-1").unwrap();
    grag.workspaces()
        .upload_document(&kb_id, &upload("doc-1", TEXT))
        .await
        .unwrap();
    let query = SearchRequest::new("Wie oft werden Tragwerke geprüft?", 2);
    // Not searchable before the ingest job has finished.
    let early = grag
        .ai_gateway(&embedded::pipeline())
        .search_rerank(&kb_id, &query)
        .await
        .unwrap();
    assert!(early.results.is_empty());
    assert!(sim.start_job("knoll", "doc-1"));
    assert!(!sim.start_job("knoll", "doc-1"), "started once");
    tokio::time::sleep(sim.config().job_duration() * 2).await;
    let hits = grag
        .ai_gateway(&embedded::pipeline())
        .search_rerank(&kb_id, &query)
        .await
        .unwrap();
    assert!(hits.results[0].text.contains("DIN 1076"), "{hits:?}");
    assert_eq!(
        hits.results[0].document_id.as_ref().unwrap().as_str(),
        "doc-1"
    );
    let docs = grag.workspaces().list_documents(&kb_id).await.unwrap();
    assert_eq!(docs[0].status.as_deref(), Some("indexed"));

    let completion = grag
        .ai_gateway(&embedded::pipeline())
        .complete(&CompletionRequest::new(vec![ChatMessage::new(
            ChatRole::User,
            "Hallo",
        )]))
        .await
        .unwrap();
    assert!(completion.content.contains("Hallo"));

    let score = grag
        .groundedness()
        .score(&ScoreRequest::new(
            "Tragwerke werden alle sechs Jahre geprüft",
            vec![Chunk::new("c1", hits.results[0].text.clone())],
        ))
        .await
        .unwrap();
    assert!(score.score > 0.5, "{score:?}");
    assert_eq!(score.grounded, Some(true));
}

#[tokio::test]
async fn ledger_totals_per_pipeline_and_spend_by_service_or_provider() {
    let sim = sim().await;
    let grag = client(&sim, "knoll");
    grag.workspaces().create_kb(&kb("kb-1")).await.unwrap();
    let kb_id = KbId::parse("kb-1").unwrap();
    let run = grag_client::PipelineId::parse("run-7").unwrap();
    let other = grag_client::PipelineId::parse("run-8").unwrap();
    let query = SearchRequest::new("x", 1);
    grag.ai_gateway(&run)
        .search_rerank(&kb_id, &query)
        .await
        .unwrap();
    grag.ai_gateway(&run)
        .search_rerank(&kb_id, &query)
        .await
        .unwrap();
    grag.ai_gateway(&other)
        .search_rerank(&kb_id, &query)
        .await
        .unwrap();
    assert_eq!(
        sim.log().of("search_rerank")[0].header("x-pipeline-id"),
        Some("run-7")
    );

    let totals = grag
        .ledger()
        .totals(&grag_client::PipelineId::parse("run-7").unwrap())
        .await
        .unwrap();
    assert_eq!(totals.calls, Some(2));
    assert!((totals.total_cost.unwrap() - 0.0008).abs() < 1e-9);
    let by_service = grag.ledger().spend(&SpendGrouping::Service).await.unwrap();
    assert_eq!(by_service.group_by, Some(SpendGrouping::Service));
    assert_eq!(by_service.items.len(), 1);
    assert_eq!(by_service.items[0].key, "ai-gateway");
    let by_provider = grag.ledger().spend(&SpendGrouping::Provider).await.unwrap();
    assert_eq!(by_provider.items[0].key, "sim-rerank");

    // Only the two groupings exist; totals needs its pipeline.
    let http = raw();
    for query in ["group_by=pipeline", ""] {
        let response = scoped(
            &http,
            Method::GET,
            format!("{}/ledger/api/v1/ledger/spend?{query}", sim.url()),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 422, "{query}");
    }
    let response = scoped(
        &http,
        Method::GET,
        format!("{}/ledger/api/v1/ledger/totals", sim.url()),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 422);
}

#[tokio::test]
async fn concurrency_and_connections_are_visible_in_the_log() {
    let sim = sim().await;
    sim.faults().on(
        "list_kbs",
        grag_sim::Fault::delay(std::time::Duration::from_millis(100)),
    );
    let grag = client(&sim, "knoll");
    let calls = (0..5).map(|_| {
        let g = grag.clone();
        async move { g.workspaces().list_kbs().await }
    });
    for r in futures_util::future::join_all(calls).await {
        r.unwrap();
    }
    let log = sim.log();
    assert_eq!(log.count("list_kbs"), 5);
    assert_eq!(log.max_in_flight(), 5, "{:?}", log.entries());
    let connections: std::collections::BTreeSet<_> =
        log.entries().iter().map(|e| e.connection).collect();
    assert_eq!(connections.len(), 5);
    assert!(log.entries().iter().all(|e| e.has_fault("delay")));
}

/// The platform's own limits, per address and tenant: past Traefik's
/// ceiling or the gateway's retrieval bucket, a 429 without Retry-After,
/// counted in the log. Windows of an hour: the test counts, never waits.
#[tokio::test]
async fn the_platform_s_limits_answer_429_without_retry_after_per_address_and_tenant() {
    let hour = std::time::Duration::from_secs(3600);
    let limits = grag_sim::PlatformLimits {
        ceiling: 5,
        second: hour,
        retrieval: 3,
        minute: hour,
    };
    let sim = embedded::start(kit::config().with_platform_limits(limits)).await;
    let http = raw();
    let search = format!(
        "{}/ai-gateway/api/v1/retrieval/collections/kb-1/search/rerank",
        sim.url()
    );
    let body = json!({"query_text": "Brücke", "top_k": 1});
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = scoped(&http, Method::POST, search.clone())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("retry-after").is_none());
        statuses.push(r.status().as_u16());
    }
    // The gateway's bucket (3 here) refuses the 4th retrieval call.
    assert!(statuses[..3].iter().all(|&s| s != 429), "{statuses:?}");
    assert_eq!(statuses[3], 429);
    let kbs = format!("{}/workspaces/api/v1/kbs", sim.url());
    // Traefik's ceiling (5) counts every route: the 5th request passes, the 6th not.
    let fifth = scoped(&http, Method::GET, kbs.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(fifth.status(), 200);
    let sixth = scoped(&http, Method::GET, kbs.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(sixth.status(), 429);
    assert!(sixth.headers().get("retry-after").is_none());
    // Another tenant behind the same address has windows of its own.
    let other = http
        .get(kbs)
        .header("Authorization", format!("Bearer {KEY}"))
        .header("X-Tenant-ID", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    let log = sim.log();
    assert_eq!(log.count_status(429), 2);
    let faults: Vec<Vec<String>> = log
        .entries()
        .into_iter()
        .filter(|e| e.status == Some(429))
        .map(|e| e.faults)
        .collect();
    assert_eq!(
        faults,
        [
            vec!["platform_limit:gateway".to_string()],
            vec!["platform_limit:traefik".to_string()]
        ]
    );
}
