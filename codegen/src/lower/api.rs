//! Checks and lowers `api.yaml`: identity, auth, headers and ID types.

use crate::model::*;
use crate::spec;

use super::{Cx, is_camel};

impl Cx<'_> {
    pub(super) fn api(&mut self, api: &spec::ApiFile) -> Api {
        let pattern = &api.ids.pattern;
        if pattern.as_str() != sdk_runtime::scope::ID_PATTERN {
            self.error(
                pattern,
                "ids.pattern",
                format!(
                    "the runtime enforces `{}` and no other ID pattern",
                    sdk_runtime::scope::ID_PATTERN
                ),
            );
        }
        if api.auth.scheme.as_str() != "bearer" {
            self.error(
                &api.auth.scheme,
                "auth.scheme",
                "only `bearer` is supported",
            );
        }
        let mut ids = Vec::new();
        for (name, id) in &api.ids.types {
            if !is_camel(name) || !name.ends_with("Id") {
                self.error(
                    name,
                    format!("ids.types.{}", &**name),
                    "ID types are CamelCase names ending in `Id`",
                );
            }
            if ["TenantId", "WorkspaceId"].contains(&name.as_str()) {
                self.error(
                    name,
                    format!("ids.types.{}", &**name),
                    "TenantId and WorkspaceId are built in",
                );
            }
            ids.push(IdType {
                name: name.to_string(),
                doc: id.doc.to_string(),
                source: self.source(&id.source, id.inferred),
            });
        }
        for reserved in &api.ids.reserved_tenants {
            if sdk_runtime::Id::parse(
                &sdk_runtime::policy::IdRules {
                    reserved_tenants: &[],
                },
                sdk_runtime::IdKind::Workspace,
                reserved,
            )
            .is_err()
            {
                self.error(
                    reserved,
                    "ids.reserved_tenants",
                    "a reserved tenant must itself look like an ID",
                );
            }
        }
        let h = &api.headers;
        Api {
            name: api.api.to_string(),
            title: api.title.to_string(),
            crate_name: api.crate_name.to_string(),
            client: api.client.to_string(),
            doc: api.doc.to_string(),
            origin_env: api.origin.env.to_string(),
            key_env: api.auth.env.to_string(),
            tenant_env: api.auth.tenant_env.to_string(),
            headers: Headers {
                authorization: h.authorization.to_string(),
                tenant: h.tenant.to_string(),
                workspace: h.workspace.to_string(),
                request_id: h.request_id.to_string(),
                pipeline: h.pipeline.to_string(),
            },
            id_pattern: pattern.to_string(),
            reserved_tenants: api
                .ids
                .reserved_tenants
                .iter()
                .map(|t| t.to_string())
                .collect(),
            ids,
            workspace_services: api
                .workspace_services
                .services
                .iter()
                .map(|s| s.to_string())
                .collect(),
            source: self.source(&api.origin.source, api.origin.inferred),
        }
    }
}
