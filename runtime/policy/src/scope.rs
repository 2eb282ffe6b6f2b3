//! Validated identifiers: the only way to get one is through [`Id::parse`].
//!
//! The generated crate wraps [`Id`] in one newtype per kind (`TenantId`,
//! `WorkspaceId`, `KbId`, ...) with a private field, so a raw string never
//! reaches a header or a path unchecked.

use std::fmt;
use std::sync::Arc;

use crate::policy::IdRules;

/// The ID pattern the runtime enforces: a lowercase DNS label,
/// `^[a-z0-9][a-z0-9-]{0,62}$`. The generator refuses a spec naming another.
pub const ID_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,62}$";

/// A validated identifier. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    kind: IdKind,
    value: Arc<str>,
}

/// What an [`Id`] identifies. Tenants get the reserved-name check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdKind {
    Tenant,
    Workspace,
    /// Any other ID, named after its type (`KbId`).
    Other(&'static str),
}

impl IdKind {
    fn name(self) -> &'static str {
        match self {
            IdKind::Tenant => "TenantId",
            IdKind::Workspace => "WorkspaceId",
            IdKind::Other(name) => name,
        }
    }
}

/// Why a string is not a valid ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    #[error("{kind} is empty")]
    Empty { kind: &'static str },
    #[error("{kind} {value:?} is longer than 63 characters")]
    TooLong { kind: &'static str, value: String },
    #[error("{kind} {value:?} does not match {ID_PATTERN}")]
    Pattern { kind: &'static str, value: String },
    #[error("tenant {value:?} is reserved by the platform and never used by a client")]
    ReservedTenant { value: String },
    #[error("{kind} of {len} bytes is longer than {max}")]
    OpaqueTooLong {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{kind} {value:?} is not safe in a path (`/`, a control character, `.` or `..`)")]
    Unsafe { kind: &'static str, value: String },
}

impl Id {
    /// Validates `value` as an ID of `kind`.
    pub fn parse(rules: &IdRules, kind: IdKind, value: &str) -> Result<Id, InvalidId> {
        let name = kind.name();
        let bytes = value.as_bytes();
        let Some(&first) = bytes.first() else {
            return Err(InvalidId::Empty { kind: name });
        };
        if let IdKind::Other(type_name) = kind
            && rules.opaque.contains(&type_name)
        {
            return Self::opaque(rules, kind, value);
        }
        if bytes.len() > 63 {
            return Err(InvalidId::TooLong {
                kind: name,
                value: value.to_owned(),
            });
        }
        let label = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !label(first) || !bytes.iter().all(|&b| label(b) || b == b'-') {
            return Err(InvalidId::Pattern {
                kind: name,
                value: value.to_owned(),
            });
        }
        if kind == IdKind::Tenant && rules.reserved_tenants.contains(&value) {
            return Err(InvalidId::ReservedTenant {
                value: value.to_owned(),
            });
        }
        Ok(Id {
            kind,
            value: value.into(),
        })
    }

    /// An ID the platform mints: only what keeps it one path segment and a
    /// header-safe value is checked, and its length.
    fn opaque(rules: &IdRules, kind: IdKind, value: &str) -> Result<Id, InvalidId> {
        let name = kind.name();
        if value.len() > rules.opaque_max_len {
            return Err(InvalidId::OpaqueTooLong {
                kind: name,
                len: value.len(),
                max: rules.opaque_max_len,
            });
        }
        let unsafe_char = value.chars().any(|c| c == '/' || c.is_control());
        if unsafe_char || value == "." || value == ".." {
            // A value this long in an error would be the server's to size.
            let value = value.chars().take(64).collect();
            return Err(InvalidId::Unsafe { kind: name, value });
        }
        Ok(Id {
            kind,
            value: value.into(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.value
    }

    pub fn kind(&self) -> IdKind {
        self.kind
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.kind.name(), &*self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: IdRules = IdRules {
        reserved_tenants: &["default", "system", "canary"],
        opaque: &["JobId"],
        opaque_max_len: 256,
    };

    #[test]
    fn opaque_ids_need_only_be_path_safe() {
        let job = IdKind::Other("JobId");
        for ok in ["Job_7", "a.b", "UPPER-case_123", "ä", &"x".repeat(256)] {
            assert_eq!(parse(job, ok).unwrap().as_str(), ok);
        }
        assert!(matches!(parse(job, ""), Err(InvalidId::Empty { .. })));
        assert!(matches!(
            parse(job, &"x".repeat(257)),
            Err(InvalidId::OpaqueTooLong { len: 257, .. })
        ));
        for bad in ["a/b", ".", "..", "a\nb", "a\rb", "a\u{7f}", "a\0"] {
            assert!(
                matches!(parse(job, bad), Err(InvalidId::Unsafe { .. })),
                "{bad:?}"
            );
        }
        // The DNS-label rule still holds where the policy sets it.
        assert!(parse(IdKind::Other("KbId"), "Job_7").is_err());
    }

    fn parse(kind: IdKind, s: &str) -> Result<Id, InvalidId> {
        Id::parse(&RULES, kind, s)
    }

    #[test]
    fn accepts_dns_labels() {
        for ok in ["a", "0", "acme", "kb-methodik", "a-", &"a".repeat(63)] {
            assert_eq!(parse(IdKind::Other("KbId"), ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_everything_else() {
        let kb = IdKind::Other("KbId");
        assert!(matches!(parse(kb, ""), Err(InvalidId::Empty { .. })));
        assert!(matches!(
            parse(kb, &"a".repeat(64)),
            Err(InvalidId::TooLong { .. })
        ));
        for bad in ["-a", "A", "a_b", "a b", "ä", "a/b", "a.b", "a\n"] {
            assert!(
                matches!(parse(kb, bad), Err(InvalidId::Pattern { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn reserved_tenants_are_refused_only_as_tenants() {
        for reserved in ["default", "system", "canary"] {
            assert_eq!(
                parse(IdKind::Tenant, reserved),
                Err(InvalidId::ReservedTenant {
                    value: reserved.into()
                })
            );
            assert!(parse(IdKind::Workspace, reserved).is_ok());
        }
        assert!(parse(IdKind::Tenant, "acme").is_ok());
    }

    #[test]
    fn errors_name_the_kind() {
        let err = parse(IdKind::Workspace, "WS").unwrap_err();
        assert_eq!(
            err.to_string(),
            "WorkspaceId \"WS\" does not match ^[a-z0-9][a-z0-9-]{0,62}$"
        );
    }
}
