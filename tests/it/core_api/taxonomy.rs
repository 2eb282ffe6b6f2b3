//! Every row of the Core taxonomy (`spec/core/taxonomy.yaml`), as a table of
//! failing calls against the scripted Core: the row, class and copy of the
//! final error, its status, the attempts the client made, the requests that
//! reached Core and whether the outcome is unknown. A row without a case fails
//! [`every_row_of_the_core_taxonomy_has_a_case`].

use std::collections::BTreeMap;
use std::time::Duration;

use core_client::policy::POLICY;
use core_client::{Core, ErrorClass};
use sdk_runtime::Call;

use super::{CoreSim, Step, analyse, decision, session};

/// Longer than any attempt and the deadline: an answer that never comes.
const NEVER: Duration = Duration::from_secs(1000);

/// What the client is asked to do.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// `engine().analyse`: a contract call, idempotent.
    Analyse,
    /// `sessions().get_session`: a read.
    GetSession,
    /// `sessions().accept`: a workflow action, sent at most once.
    Accept,
    /// A session id of `..`, which would fold onto another route (through the runtime).
    DotDotPath,
    /// An analyse body serde cannot encode (through the runtime).
    Unencodable,
}

/// How Core answers.
#[derive(Clone, Copy)]
enum Inject {
    /// These answers, in order; then well-formed ones.
    Script(&'static [Step]),
    /// A well-formed 200 one byte over the route's cap.
    OverCap,
    /// Eight calls that never get an answer hold every in-flight slot first.
    Crowd,
}

struct Case {
    what: &'static str,
    ask: Ask,
    inject: Inject,
    row: &'static str,
    class: ErrorClass,
    status: Option<u16>,
    attempts: u32,
    /// Requests of this call that reached Core.
    sent: usize,
    unknown: bool,
}

/// A case's defaults: one attempt, answered, known outcome.
const CASE: Case = Case {
    what: "",
    ask: Ask::Analyse,
    inject: Inject::Script(&[]),
    row: "",
    class: ErrorClass::Unclassified,
    status: None,
    attempts: 1,
    sent: 1,
    unknown: false,
};

use Ask::*;
use ErrorClass as C;
use Inject::*;

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { what: "a path value that folds onto another route", ask: DotDotPath, row: "C22", class: C::InvalidScope, attempts: 0, sent: 0, ..CASE },
    Case { what: "a body that cannot be encoded", ask: Unencodable, row: "C23", class: C::InvalidRequest, attempts: 0, sent: 0, ..CASE },
    Case { what: "a call that waited for a slot behind eight hung calls", inject: Crowd, row: "C20", class: C::Deadline, attempts: 2, sent: 2, ..CASE },
    Case { what: "a read without an answer: retried once", ask: GetSession, inject: Script(&[Step::Hang(NEVER), Step::Hang(NEVER)]), row: "C1", class: C::Transport, attempts: 2, sent: 2, ..CASE },
    Case { what: "a workflow action without an answer: sent once", ask: Accept, inject: Script(&[Step::Hang(NEVER)]), row: "C1", class: C::Transport, unknown: true, ..CASE },
    Case { what: "a 5xx to a contract call: retried once", inject: Script(&[Step::Status(503, "busy"), Step::Status(500, "boom")]), row: "C2", class: C::ServerError, status: Some(500), attempts: 2, sent: 2, ..CASE },
    Case { what: "a 5xx to a workflow action: never re-sent", ask: Accept, inject: Script(&[Step::Status(500, "boom")]), row: "C2", class: C::ServerError, status: Some(500), unknown: true, ..CASE },
    Case { what: "a 4xx, surfaced at once", inject: Script(&[Step::Status(422, "text must not be empty")]), row: "C3", class: C::HttpError, status: Some(422), ..CASE },
    Case { what: "a 4xx to a workflow action: a known outcome", ask: Accept, inject: Script(&[Step::Status(409, "step already advanced")]), row: "C3", class: C::HttpError, status: Some(409), ..CASE },
    Case { what: "a redirect, never followed", ask: GetSession, inject: Script(&[Step::Redirect("/platform/v1/sessions/s-2")]), row: "C4", class: C::UnexpectedStatus, status: Some(302), ..CASE },
    Case { what: "a 2xx that is not JSON", inject: Script(&[Step::Raw("<html>proxy error</html>")]), row: "C5", class: C::InvalidJson, status: Some(200), ..CASE },
    Case { what: "a 2xx one byte over the route's cap", ask: GetSession, inject: OverCap, row: "C6", class: C::TooLarge, status: Some(200), ..CASE },
];

#[tokio::test(start_paused = true)]
async fn each_case_ends_on_its_row() {
    for case in CASES {
        check(case).await;
    }
}

#[test]
fn every_row_of_the_core_taxonomy_has_a_case() {
    let uncovered: Vec<&str> = POLICY
        .taxonomy
        .iter()
        .map(|r| r.row)
        .filter(|row| !CASES.iter().any(|c| c.row == *row))
        .collect();
    assert!(
        uncovered.is_empty(),
        "Core taxonomy rows without a case: {uncovered:?}"
    );
}

async fn check(case: &Case) {
    let what = case.what;
    let script: Vec<Step> = match case.inject {
        Script(steps) => steps.to_vec(),
        OverCap => {
            let cap = core_client::sessions::GET_SESSION.max_response;
            vec![Step::Sized(cap + 1)]
        }
        Crowd => vec![Step::Hang(NEVER); 64],
    };
    let core = CoreSim::start(script).await;
    let client = core.client();
    let crowd = match case.inject {
        Crowd => hold_every_slot(&core, &client).await,
        _ => Vec::new(),
    };
    let error = ask(&client, case.ask).await;
    let crowd_sent: u32 = futures_util::future::join_all(crowd)
        .await
        .into_iter()
        .map(|held| held.expect("a crowd call").attempts())
        .sum();

    assert_eq!(error.row(), case.row, "{what}: row of {error}");
    assert_eq!(error.class(), case.class, "{what}: class of {error}");
    assert_eq!(error.class_name(), case.class.as_str(), "{what}");
    let row = POLICY.taxonomy.iter().find(|r| r.row == case.row);
    let copy = match case.unknown {
        true => row.and_then(|r| r.unknown_message),
        false => POLICY.message(case.class.as_str()),
    };
    assert!(copy.is_some(), "{what}: the spec has copy for it");
    assert_eq!(error.message(), copy, "{what}: the copy of {error}");
    assert_eq!(error.status(), case.status, "{what}: status of {error}");
    assert_eq!(
        error.attempts(),
        case.attempts,
        "{what}: attempts of {error}"
    );
    assert_eq!(
        core.paths().len() - crowd_sent as usize,
        case.sent,
        "{what}: requests that reached Core ({:?})",
        core.paths()
    );
    assert_eq!(
        error.outcome_unknown(),
        case.unknown,
        "{what}: outcome unknown of {error}"
    );
}

/// Starts as many hung analyse calls as the throttle lets in at once and
/// waits until Core has seen each (a call holds its slot while it is sent).
async fn hold_every_slot(
    core: &CoreSim,
    client: &Core,
) -> Vec<tokio::task::JoinHandle<core_client::Error>> {
    let slots = POLICY.throttle.max_in_flight as usize;
    let held: Vec<_> = (0..slots)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.engine().analyse(&analyse()).await.unwrap_err() })
        })
        .collect();
    while core.paths().len() < slots {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    held
}

async fn ask(client: &Core, ask: Ask) -> core_client::Error {
    let outcome = match ask {
        Analyse => client.engine().analyse(&analyse()).await.map(drop),
        GetSession => client.sessions().get_session(&session()).await.map(drop),
        Accept => client
            .sessions()
            .accept(&session(), &decision())
            .await
            .map(drop),
        DotDotPath => {
            let call = Call::new(&core_client::sessions::GET_SESSION).path("..");
            return client.runtime().send(call).await.unwrap_err().into();
        }
        Unencodable => {
            let body = BTreeMap::from([((1, 2), "value")]);
            let call = Call::new(&core_client::engine::ANALYSE).json(&body);
            return client.runtime().send(call).await.unwrap_err().into();
        }
    };
    outcome.expect_err("the scripted Core fails it")
}
