//! The spec edits the semver step rehearses, each with the verdict the
//! generator must give and how cargo-semver-checks' verdict must relate to it.

/// How cargo-semver-checks' verdict must relate to ours.
#[derive(Clone, Copy)]
pub(super) enum Expect {
    /// It must say what we say.
    Same,
    /// We say breaking and it may not see it: the reason it cannot.
    Stricter(&'static str),
}

/// One spec edit on a scratch copy: `from` replaced by `to` (once) in
/// `spec/<api>/<file>`.
pub(super) struct Case {
    pub name: &'static str,
    pub api: &'static str,
    pub file: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    /// Whether the generator must call the edit breaking.
    pub breaking: bool,
    pub expect: Expect,
}

/// A type's argument or field changing type is no lint of cargo-semver-checks
/// 0.51.0 (it lints counts, receivers and removals), yet a consumer's
/// `hit.score + 1.0` or `SearchHit::new(.., 0.5)` stops compiling.
const RETYPED: &str = "no lint for a changed field or argument type";

const SEARCH_HIT: &str =
    "      document_id: DocumentId?\n      text: string\n      score: number\n";
const RESULT: &str = "    path: /convert/{conversion_id}/result\n    path_params:\n      conversion_id: ConversionId\n";
const COMPLETE: &str = "  complete:
    doc: An LLM completion; not idempotent (it spends budget), never retried once sent.
    method: POST
    path: /llm/completions
    body: CompletionRequest
    returns: Completion
    idempotent: false
    # What a completion spent is booked on the ledger under its X-Pipeline-Id
    # (§10.1): the read that tells whether an unanswered one ran.
    reconcile: ledger.totals
    timeout: llm
    retry: R1          # the runtime never retries a non-idempotent call after send
    budget: global
    pipeline_id: true
    source: \"§4.1, §7, §10.1\"
    inferred: true
";
const LIST_FINDINGS: &str = "  list_findings:
    doc: The findings of a session with their decisions.
    method: GET
    path: /v1/sessions/{session_id}/findings
    path_params:
      session_id: SessionId
    returns: list<SessionFinding>
    idempotent: true
    timeout: default
    retry: C1
    budget: global
    source: \"Idempotency\"
";

pub(super) const CASES: [Case; 12] = [
    Case {
        name: "optional answer field added",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: "      metadata: json?\n    source: \"§7\"\n    inferred: true\n  SearchResults:",
        to: "      metadata: json?\n      note: string?\n    source: \"§7\"\n    inferred: true\n  SearchResults:",
        breaking: false,
        expect: Expect::Same,
    },
    Case {
        name: "optional request field added",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: "      top_k: integer\n",
        to: "      top_k: integer\n      filter: string?\n",
        breaking: false,
        expect: Expect::Same,
    },
    Case {
        name: "route added",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: "  complete:\n",
        to: "  models:
    doc: The models the gateway routes completions to.
    method: GET
    path: /llm/models
    returns: list<string>
    idempotent: true
    timeout: default
    retry: R1
    budget: global
    pipeline_id: true
    source: \"§7\"
    inferred: true
  complete:\n",
        breaking: false,
        expect: Expect::Same,
    },
    Case {
        name: "enum value added to an open enum",
        api: "grag",
        file: "services/docfold.yaml",
        from: "      - value: failed\n        doc: The document could not be converted.\n",
        to: "      - value: failed\n        doc: The document could not be converted.\n      - value: cancelled\n        doc: Stopped before it finished.\n",
        breaking: false,
        expect: Expect::Same,
    },
    Case {
        name: "route removed",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: COMPLETE,
        to: "",
        breaking: true,
        expect: Expect::Same,
    },
    Case {
        name: "field made required",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: SEARCH_HIT,
        to: "      document_id: DocumentId\n      text: string\n      score: number\n",
        breaking: true,
        expect: Expect::Same,
    },
    Case {
        name: "field retyped",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: SEARCH_HIT,
        to: "      document_id: DocumentId?\n      text: string\n      score: string\n",
        breaking: true,
        expect: Expect::Stricter(RETYPED),
    },
    Case {
        name: "path parameter added",
        api: "grag",
        file: "services/docfold.yaml",
        from: RESULT,
        to: "    path: /convert/{conversion_id}/pages/{page}/result\n    path_params:\n      conversion_id: ConversionId\n      page: string\n",
        breaking: true,
        expect: Expect::Same,
    },
    Case {
        name: "enum value the client sends removed",
        api: "grag",
        file: "services/ai-gateway.yaml",
        from: "      - value: system\n        doc: Instructions the model follows.\n",
        to: "",
        breaking: true,
        expect: Expect::Same,
    },
    Case {
        name: "optional answer field added",
        api: "core",
        file: "services/sessions.yaml",
        from: "      updated_at: string?\n",
        to: "      updated_at: string?\n      closed_at: string?\n",
        breaking: false,
        expect: Expect::Same,
    },
    Case {
        name: "required request field added",
        api: "core",
        file: "services/sessions.yaml",
        from: "      comment: string?\n",
        to: "      comment: string?\n      reason: string\n",
        breaking: true,
        expect: Expect::Same,
    },
    Case {
        name: "route removed",
        api: "core",
        file: "services/sessions.yaml",
        from: LIST_FINDINGS,
        to: "",
        breaking: true,
        expect: Expect::Same,
    },
];
