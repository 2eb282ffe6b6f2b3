//! The client: one per tenant, shared state behind an `Arc`, cheap clones.

use std::sync::Arc;

use crate::error::ConfigError;
use crate::policy::Policy;
use crate::throttle::Throttle;
use crate::{Id, IdKind, InvalidId};

/// What a client needs besides its policy. The tenant is an [`Id`] of kind
/// tenant: validated, never defaulted.
pub struct ClientConfig {
    pub(crate) base_url: String,
    pub(crate) api_key: String,
    pub(crate) tenant: Id,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>, tenant: Id) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key: api_key.into(),
            tenant,
        }
    }
}

/// The runtime side of a generated client.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pipeline_id: Option<Arc<str>>,
}

pub(crate) struct Shared {
    pub(crate) policy: &'static Policy,
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) api_key: String,
    pub(crate) tenant: Id,
    pub(crate) throttle: Throttle,
}

impl Client {
    pub fn new(policy: &'static Policy, config: ClientConfig) -> Result<Client, ConfigError> {
        if config.tenant.kind() != IdKind::Tenant {
            return Err(ConfigError::NotATenant(kind_name(config.tenant.kind())));
        }
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ConfigError::BaseUrl {
                url: config.base_url,
                reason: "must start with http:// or https://".into(),
            });
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ConfigError::Http(e.to_string()))?;
        Ok(Client {
            shared: Arc::new(Shared {
                policy,
                http,
                base_url,
                api_key: config.api_key,
                tenant: config.tenant,
                throttle: Throttle::new(&policy.throttle),
            }),
            pipeline_id: None,
        })
    }

    /// The same client, stamping the pipeline header on routes that carry it.
    pub fn with_pipeline_id(&self, pipeline_id: &str) -> Result<Client, InvalidId> {
        let id = Id::parse(
            &self.shared.policy.ids,
            IdKind::Other("PipelineId"),
            pipeline_id,
        )?;
        Ok(Client {
            shared: self.shared.clone(),
            pipeline_id: Some(id.as_str().into()),
        })
    }

    pub fn policy(&self) -> &'static Policy {
        self.shared.policy
    }

    pub fn tenant(&self) -> &Id {
        &self.shared.tenant
    }

    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    pub fn throttle(&self) -> &Throttle {
        &self.shared.throttle
    }
}

fn kind_name(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Tenant => "TenantId",
        IdKind::Workspace => "WorkspaceId",
        IdKind::Other(name) => name,
    }
}
