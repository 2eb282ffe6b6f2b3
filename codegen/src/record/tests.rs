//! The rehearsal table: each spec edit, as the record lines it changes, and
//! the verdict and version it must give.

use super::{Class, bump, diff};

const BASE: &str = "\
# header
field SearchHit.chunk_id string
field SearchHit.score number
field SearchHit.title string?
field SearchRequest.query_text string
field SearchRequest.top_k integer
param ai.search.kb_id path:KbId
returns ai.search SearchResponse
route ai.search POST /v1/kbs/{kb_id}/search scope=workspace
value Mode.fast -
value Mode.slow -
behaviour timeout.search per_attempt=30s deploy_suspected=None
";

/// `BASE` with `remove` lines taken out and `add` lines put in.
fn edit(remove: &[&str], add: &[&str]) -> String {
    let mut lines: Vec<String> = BASE
        .lines()
        .filter(|l| !remove.contains(l))
        .map(str::to_owned)
        .collect();
    lines.extend(add.iter().map(|l| (*l).to_owned()));
    lines.join("\n")
}

/// The worst class of the changes, and the version after 0.2.3.
fn verdict(new: &str) -> (Class, String, usize) {
    let changes = diff(BASE, new);
    let worst = changes.iter().map(|c| c.class).max().expect("a change");
    let version = bump("0.2.3", &changes).expect("a version");
    (worst, version, changes.len())
}

#[test]
fn an_unchanged_record_has_no_change_and_no_bump() {
    assert!(diff(BASE, BASE).is_empty());
    assert_eq!(bump("0.2.3", &[]), None);
}

#[test]
fn the_rehearsal_table_gives_each_edit_its_class_and_version() {
    let path = "route ai.search POST /v1/kbs/{kb_id}/search scope=workspace";
    let table: [(&str, String, Class, &str); 10] = [
        (
            "optional answer field added",
            edit(&[], &["field SearchHit.note string?"]),
            Class::Compatible,
            "0.2.4",
        ),
        (
            "optional request field added",
            edit(&[], &["field SearchRequest.filter string?"]),
            Class::Compatible,
            "0.2.4",
        ),
        (
            "route added",
            edit(&[], &["route ai.ping GET /v1/ping scope=tenant"]),
            Class::Compatible,
            "0.2.4",
        ),
        (
            "enum value added",
            edit(&[], &["value Mode.deep -"]),
            Class::Compatible,
            "0.2.4",
        ),
        (
            "route removed",
            edit(
                &[
                    path,
                    "param ai.search.kb_id path:KbId",
                    "returns ai.search SearchResponse",
                ],
                &[],
            ),
            Class::Breaking,
            "0.3.0",
        ),
        (
            "field made required",
            edit(
                &["field SearchHit.title string?"],
                &["field SearchHit.title string"],
            ),
            Class::Breaking,
            "0.3.0",
        ),
        (
            "field retyped",
            edit(
                &["field SearchRequest.top_k integer"],
                &["field SearchRequest.top_k string"],
            ),
            Class::Breaking,
            "0.3.0",
        ),
        (
            "path parameter added",
            edit(
                &[path],
                &[
                    "route ai.search POST /v1/kbs/{kb_id}/{shard}/search scope=workspace",
                    "param ai.search.shard path:string",
                ],
            ),
            Class::Breaking,
            "0.3.0",
        ),
        (
            "enum value the client sends removed",
            edit(&["value Mode.slow -"], &[]),
            Class::Breaking,
            "0.3.0",
        ),
        (
            "timeout changed",
            edit(
                &["behaviour timeout.search per_attempt=30s deploy_suspected=None"],
                &["behaviour timeout.search per_attempt=20s deploy_suspected=None"],
            ),
            Class::Behaviour,
            "0.2.4",
        ),
    ];
    for (name, new, class, version) in table {
        let (got, bumped, _) = verdict(&new);
        assert_eq!((got, bumped.as_str()), (class, version), "{name}");
    }
}

#[test]
fn a_field_made_required_says_so_and_what_to_do() {
    let old = "field SearchHit.score number?\n";
    let new = "field SearchHit.score number\n";
    let changes = diff(old, new);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].class, Class::Breaking);
    assert!(
        changes[0].what.contains("made required"),
        "{:?}",
        changes[0]
    );
    assert!(changes[0].action.as_deref().unwrap().contains("`new`"));
}

#[test]
fn a_required_field_added_is_breaking() {
    let (class, version, _) = verdict(&edit(&[], &["field SearchRequest.lang string"]));
    assert_eq!((class, version.as_str()), (Class::Breaking, "0.3.0"));
}

#[test]
fn every_breaking_change_says_what_a_consumer_must_do() {
    let new = edit(
        &["value Mode.slow -", "field SearchRequest.top_k integer"],
        &[],
    );
    for c in diff(BASE, &new) {
        assert_eq!(c.class, Class::Breaking);
        assert!(c.action.is_some(), "{c:?}");
    }
}

#[test]
fn a_major_version_bumps_by_semver_and_junk_gives_none() {
    let breaking = diff("value Mode.slow -\n", "");
    assert_eq!(bump("1.4.2", &breaking).as_deref(), Some("2.0.0"));
    assert_eq!(bump("not.a.version", &breaking), None);
}

#[test]
fn a_struct_sealed_is_breaking_once_and_an_answer_already_sealed_is_no_change() {
    // The first records wrote `-`: their generator sealed only the answered types.
    let old = "struct SearchHit -\nstruct SearchRequest -\n";
    let new =
        "struct SearchHit non_exhaustive answered\nstruct SearchRequest non_exhaustive sent\n";
    let changes = diff(old, new);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].class, Class::Breaking);
    assert_eq!(
        changes[0].what,
        "type `SearchRequest` is now `#[non_exhaustive]`"
    );
    let action = changes[0].action.as_deref().unwrap();
    assert!(action.contains("`SearchRequest::new`"), "{action}");
    assert_eq!(bump("0.2.0", &changes).as_deref(), Some("0.3.0"));
    assert!(diff(new, new).is_empty());
}

#[test]
fn a_struct_that_changes_role_is_compatible() {
    let answered = "struct Hit non_exhaustive answered\n";
    let sent = "struct Hit non_exhaustive sent\n";
    for (old, new, role) in [
        (answered, sent, "no longer only answered"),
        (sent, answered, "now only answered"),
    ] {
        let changes = diff(old, new);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].class, Class::Compatible);
        assert_eq!(changes[0].what, format!("type `Hit` is {role}"));
    }
}
