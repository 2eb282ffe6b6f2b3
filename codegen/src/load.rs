//! Reads the YAML files of one API into the raw [`spec`](crate::spec) types.

use std::path::{Path, PathBuf};

use marked_yaml::{FromYamlError, LoadError, LoaderOptions, Marker};
use serde::de::DeserializeOwned;

use crate::error::Sources;
use crate::spec::{ApiFile, DegradationFile, PolicyFile, ServiceFile, StreamsFile, TaxonomyFile};

/// The raw files of one API, parsed but not yet checked against each other.
#[derive(Debug)]
pub struct RawSpec {
    pub api: ApiFile,
    pub policy: PolicyFile,
    pub taxonomy: TaxonomyFile,
    pub streams: StreamsFile,
    pub degradation: DegradationFile,
    pub services: Vec<ServiceFile>,
}

/// Reads every `.yaml` file of an API folder (`spec/grag`), services sorted by name.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    for name in ["api", "policy", "taxonomy", "streams", "degradation"] {
        let path = dir.join(format!("{name}.yaml"));
        if name == "streams" && !path.exists() {
            continue;
        }
        files.push((path.clone(), std::fs::read_to_string(&path)?));
    }
    let mut services: Vec<PathBuf> = std::fs::read_dir(dir.join("services"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    services.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    services.sort();
    for path in services {
        let text = std::fs::read_to_string(&path)?;
        files.push((path, text));
    }
    Ok(files)
}

/// Parses the files: the five fixed ones by file name, the rest as services.
/// Returns `None` when a file failed; its errors are in `sources`.
pub fn parse(files: &[(PathBuf, String)], sources: &mut Sources) -> Option<RawSpec> {
    let mut api = None;
    let mut policy = None;
    let mut taxonomy = None;
    let mut streams = None;
    let mut degradation = None;
    let mut services = Vec::new();
    for (path, text) in files {
        let source = sources.add(path.clone());
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let in_services = path
            .parent()
            .and_then(|p| p.file_name())
            .is_some_and(|n| n == "services");
        if in_services {
            services.extend(one(source, text, sources));
            continue;
        }
        match stem {
            "api" => api = one(source, text, sources),
            "policy" => policy = one(source, text, sources),
            "taxonomy" => taxonomy = one(source, text, sources),
            "streams" => streams = one(source, text, sources),
            "degradation" => degradation = one(source, text, sources),
            _ => sources.in_file(
                source,
                "",
                "unknown spec file: expected api, policy, taxonomy, streams, degradation or services/*.yaml",
            ),
        }
    }
    for (name, present) in [
        ("api.yaml", api.is_some()),
        ("policy.yaml", policy.is_some()),
        ("taxonomy.yaml", taxonomy.is_some()),
        ("degradation.yaml", degradation.is_some()),
    ] {
        if !present && !files.iter().any(|(p, _)| p.ends_with(name)) {
            sources.in_file(0, "", format!("{name} is missing"));
        }
    }
    if sources.has_errors() {
        return None;
    }
    Some(RawSpec {
        api: api?,
        policy: policy?,
        taxonomy: taxonomy?,
        // An API without event streams has no streams.yaml.
        streams: match streams {
            Some(streams) => streams,
            None if files.iter().any(|(p, _)| p.ends_with("streams.yaml")) => return None,
            None => StreamsFile::default(),
        },
        degradation: degradation?,
        services,
    })
}

/// Parses one file, recording its error (with file, line and field) on failure.
fn one<T: DeserializeOwned>(source: usize, text: &str, sources: &mut Sources) -> Option<T> {
    let options = LoaderOptions::default().error_on_duplicate_keys(true);
    match marked_yaml::from_yaml_with_options(source, text, options) {
        Ok(value) => Some(value),
        Err(FromYamlError::FromNode(e)) => {
            let field = e.path().unwrap_or("").to_owned();
            let marker = e.start_mark();
            sources.at_marker(marker.as_ref(), field, (*e).to_string());
            None
        }
        Err(FromYamlError::ParseYaml(e)) => {
            let (marker, message) = load_error(&e);
            sources.at_marker(marker.as_ref(), "", message);
            None
        }
    }
}

fn load_error(e: &LoadError) -> (Option<Marker>, String) {
    match e {
        LoadError::TopLevelMustBeMapping(m) => (Some(*m), "the file must be a mapping".into()),
        LoadError::TopLevelMustBeSequence(m) => (Some(*m), "the file must be a sequence".into()),
        LoadError::UnexpectedAnchor(m) => (Some(*m), "anchors and aliases are not allowed".into()),
        LoadError::MappingKeyMustBeScalar(m) => (Some(*m), "mapping keys must be scalars".into()),
        LoadError::UnexpectedTag(m) => (Some(*m), "explicit tags are not allowed".into()),
        LoadError::ScanError(m, err) => (Some(*m), format!("not valid YAML: {err}")),
        LoadError::DuplicateKey(inner) => (
            Some(*inner.key.span().start().unwrap_or(&Marker::new(0, 0, 0, 0))),
            format!("duplicate key `{}`", inner.key.as_str()),
        ),
    }
}
