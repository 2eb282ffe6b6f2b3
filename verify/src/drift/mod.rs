//! `drift`: the spec against the platform's own OpenAPI documents, per service.

pub mod diff;
pub mod shape;

use std::time::Duration;

use grag_client::policy::{OPENAPI, OPENAPI_DOCUMENTS};
use serde::Serialize;
use serde_json::Value;

pub use diff::{Finding, Kind};
use shape::Api;

use crate::Exit;
use crate::progress::Progress;

/// The largest document read, from a file or over HTTP.
pub const MAX_DOCUMENT: usize = 16 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where one service's document comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Url(String),
    File(std::path::PathBuf),
}

impl Source {
    /// `http(s)://…` is a URL, anything else a file.
    pub fn parse(text: &str) -> Source {
        if text.starts_with("http://") || text.starts_with("https://") {
            Source::Url(text.to_owned())
        } else {
            Source::File(text.into())
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Url(u) => f.write_str(u),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// An `--openapi [SERVICE=]FILE|URL`: for one service, or one document for all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub service: Option<String>,
    pub source: Source,
}

impl std::str::FromStr for Override {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (service, location) = match text.split_once('=') {
            Some((s, rest)) if !s.contains('/') && !s.contains(':') => (Some(s.to_owned()), rest),
            _ => (None, text),
        };
        if let Some(s) = &service
            && !OPENAPI_DOCUMENTS.iter().any(|(name, _)| name == s)
        {
            let known: Vec<&str> = OPENAPI_DOCUMENTS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "no service `{s}` with a document; one of {}",
                known.join(", ")
            ));
        }
        Ok(Override {
            service,
            source: Source::parse(location),
        })
    }
}

/// One service's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceDrift {
    pub service: String,
    pub document: String,
    /// Why the document could not be compared; `None` when it was.
    pub unavailable: Option<String>,
    /// Routes of the spec compared.
    pub routes: usize,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub origin: String,
    pub services: Vec<ServiceDrift>,
}

impl DriftReport {
    pub fn breaking(&self) -> usize {
        self.findings().filter(|f| f.breaking).count()
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.services.iter().flat_map(|s| &s.findings)
    }

    /// 1 on breaking drift or a document the platform did not serve.
    pub fn exit(&self) -> Exit {
        if self.breaking() > 0 || self.services.iter().any(|s| s.unavailable.is_some()) {
            Exit::Platform
        } else {
            Exit::Ok
        }
    }
}

/// Why drift could not run at all: our side.
#[derive(Debug)]
pub struct SetupError(pub String);

/// Compares every service that has a document (or `only`) at `origin`,
/// overridden per service or as a whole by `overrides`.
pub async fn run(
    origin: &str,
    overrides: &[Override],
    only: Option<&str>,
    progress: &Progress,
) -> Result<DriftReport, SetupError> {
    let spec: Value = serde_json::from_str(OPENAPI)
        .map_err(|e| SetupError(format!("the generated document does not parse: {e}")))?;
    let http = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| SetupError(format!("no HTTP client: {e}")))?;
    let whole = overrides.iter().find(|o| o.service.is_none());
    let whole_doc = match whole {
        Some(o) => Some(load(&http, &o.source).await),
        None => None,
    };
    let mut services = Vec::new();
    for (service, path) in OPENAPI_DOCUMENTS {
        if only.is_some_and(|o| o != service) {
            continue;
        }
        let mount = path.rsplit_once('/').map_or("", |(m, _)| m);
        let source = overrides
            .iter()
            .find(|o| o.service.as_deref() == Some(service))
            .map(|o| o.source.clone());
        let step = progress.step(&format!("drift {service}"));
        let (document, theirs) = match (&source, &whole_doc, whole) {
            (Some(s), _, _) => (s.to_string(), load(&http, s).await),
            (None, Some(doc), Some(o)) => (o.source.to_string(), doc.clone()),
            _ => {
                let s = Source::Url(format!("{}{path}", origin.trim_end_matches('/')));
                (s.to_string(), load(&http, &s).await)
            }
        };
        let ours = shape::read(&spec, "", Some(service))
            .map_err(|e| SetupError(format!("the generated document: {e}")))?;
        let drift = compare(service, document, mount, &ours, theirs);
        step.done(&match &drift.unavailable {
            Some(why) => format!("not compared: {why}"),
            None => format!(
                "{} finding(s), {} breaking",
                drift.findings.len(),
                drift.findings.iter().filter(|f| f.breaking).count()
            ),
        });
        services.push(drift);
    }
    if services.is_empty() {
        return Err(SetupError(format!(
            "no service {} has a document in the spec",
            only.unwrap_or("")
        )));
    }
    Ok(DriftReport {
        origin: origin.to_owned(),
        services,
    })
}

/// One service's spec against its document (or why there is none to read).
fn compare(
    service: &str,
    document: String,
    mount: &str,
    ours: &Api,
    theirs: Result<Value, String>,
) -> ServiceDrift {
    let compared = theirs.and_then(|doc| {
        let theirs = shape::read(&doc, mount, None).map_err(|e| e.to_string())?;
        Ok(under(theirs, mount))
    });
    let (unavailable, findings) = match compared {
        Ok(theirs) => (None, diff::compare(ours, &theirs)),
        Err(why) => (Some(why), Vec::new()),
    };
    ServiceDrift {
        service: service.to_owned(),
        document,
        unavailable,
        routes: ours.ops.len(),
        findings,
    }
}

/// Only the routes under `mount`: one document for the whole platform holds every service.
fn under(mut api: Api, mount: &str) -> Api {
    if !mount.is_empty() {
        let inside = format!("{mount}/");
        api.ops.retain(|k, _| k.template.starts_with(&inside));
    }
    api
}

/// A document as JSON, at most [`MAX_DOCUMENT`] bytes.
pub async fn load(http: &reqwest::Client, source: &Source) -> Result<Value, String> {
    let bytes = match source {
        Source::File(path) => read_file(path)?,
        Source::Url(url) => fetch(http, url).await?,
    };
    serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() > MAX_DOCUMENT {
        return Err(format!("larger than {MAX_DOCUMENT} bytes"));
    }
    Ok(bytes)
}

async fn fetch(http: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if bytes.len() + chunk.len() > MAX_DOCUMENT {
            return Err(format!("larger than {MAX_DOCUMENT} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

impl std::fmt::Display for DriftReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "drift: the spec against the platform's OpenAPI documents at {}",
            self.origin
        )?;
        for s in &self.services {
            writeln!(f)?;
            match &s.unavailable {
                Some(why) => writeln!(f, "  {} ({}): not compared: {why}", s.service, s.document)?,
                None if s.findings.is_empty() => writeln!(
                    f,
                    "  {} ({}): {} route(s), no drift",
                    s.service, s.document, s.routes
                )?,
                None => writeln!(f, "  {} ({}): {} route(s)", s.service, s.document, s.routes)?,
            }
            for x in &s.findings {
                let at = if x.at.is_empty() {
                    String::new()
                } else {
                    format!(" {}", x.at)
                };
                writeln!(
                    f,
                    "    {:<10} {:<18} {}{at}: {}",
                    if x.breaking { "BREAKING" } else { "compatible" },
                    x.kind.name(),
                    x.route,
                    x.detail
                )?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "{} finding(s), {} breaking",
            self.findings().count(),
            self.breaking()
        )
    }
}
