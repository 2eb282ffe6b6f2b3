//! Validated identifiers: the only way to get one is through [`Id::parse`].
//!
//! The generated crate wraps [`Id`] in one newtype per kind (`TenantId`,
//! `WorkspaceId`, `KbId`, ...) with a private field (`sdk_runtime::id_newtype!`),
//! so a raw string never reaches a header or a path unchecked. What an ID must
//! look like is the API's [`IdRules`]: its spec's pattern, lowered.

use std::fmt;
use std::sync::Arc;

use crate::policy::IdRules;

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
    /// Only the length is kept: the value may be a server's, of any size.
    #[error("{kind} of {len} bytes is longer than {max} bytes")]
    TooLong {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    /// `pattern` is the spec's own text (`IdRules::pattern`).
    #[error("{kind} {value:?} does not match {pattern}")]
    Pattern {
        kind: &'static str,
        value: String,
        pattern: &'static str,
    },
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
        if value.is_empty() {
            return Err(InvalidId::Empty { kind: name });
        }
        if let IdKind::Other(type_name) = kind
            && rules.opaque.contains(&type_name)
        {
            return Self::opaque(rules, kind, value);
        }
        let pattern = &rules.pattern;
        if value.len() > pattern.max_len {
            return Err(InvalidId::TooLong {
                kind: name,
                len: value.len(),
                max: pattern.max_len,
            });
        }
        if !pattern.matches(value) {
            return Err(InvalidId::Pattern {
                kind: name,
                value: value.to_owned(),
                pattern: pattern.text,
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
    use crate::policy::IdPattern;

    /// `^[a-z0-9][a-z0-9-]{0,62}$`, a lowercase DNS label, as the generator lowers it.
    const DNS_LABEL: IdPattern<'static> = IdPattern {
        text: "^[a-z0-9][a-z0-9-]{0,62}$",
        first: &[(b'a', b'z'), (b'0', b'9')],
        rest: &[(b'a', b'z'), (b'0', b'9'), (b'-', b'-')],
        min_len: 1,
        max_len: 63,
    };

    const RULES: IdRules = IdRules {
        pattern: DNS_LABEL,
        reserved_tenants: &["default", "system", "canary"],
        opaque: &["JobId"],
        opaque_max_len: 256,
    };

    /// `^[A-Za-z][A-Za-z0-9_.]{2,9}$`: another API's IDs, upper case,
    /// underscores and dots allowed, three to ten characters.
    const OTHER: IdRules = IdRules {
        pattern: IdPattern {
            text: "^[A-Za-z][A-Za-z0-9_.]{2,9}$",
            first: &[(b'A', b'Z'), (b'a', b'z')],
            rest: &[
                (b'A', b'Z'),
                (b'a', b'z'),
                (b'0', b'9'),
                (b'_', b'_'),
                (b'.', b'.'),
            ],
            min_len: 3,
            max_len: 10,
        },
        ..RULES
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
        // The pattern still holds where the policy sets it.
        assert!(parse(IdKind::Other("KbId"), "Job_7").is_err());
    }

    fn parse(kind: IdKind, s: &str) -> Result<Id, InvalidId> {
        Id::parse(&RULES, kind, s)
    }

    #[test]
    fn accepts_what_the_pattern_allows() {
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
            Err(InvalidId::TooLong { max: 63, .. })
        ));
        for bad in ["-a", "A", "a_b", "a b", "ä", "a/b", "a.b", "a\n"] {
            assert!(
                matches!(parse(kb, bad), Err(InvalidId::Pattern { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_rules_decide_not_the_runtime() {
        let kb = IdKind::Other("KbId");
        // Valid only under the other pattern: upper case, `_`, `.`.
        for id in ["Kb_7", "ACME.eu", "Abc"] {
            assert_eq!(Id::parse(&OTHER, kb, id).unwrap().as_str(), id);
            assert!(
                matches!(parse(kb, id), Err(InvalidId::Pattern { .. })),
                "{id:?}"
            );
        }
        // Valid only under the DNS label: a digit first, `-`, one or two characters.
        for id in ["7kb", "kb-7", "a", "ab"] {
            assert!(parse(kb, id).is_ok(), "{id:?}");
            assert!(Id::parse(&OTHER, kb, id).is_err(), "{id:?}");
        }
        // The other pattern's bounds: three to ten.
        assert!(matches!(
            Id::parse(&OTHER, kb, "Abcdefghijk"),
            Err(InvalidId::TooLong { max: 10, .. })
        ));
        assert_eq!(
            Id::parse(&OTHER, kb, "Ab").unwrap_err().to_string(),
            "KbId \"Ab\" does not match ^[A-Za-z][A-Za-z0-9_.]{2,9}$"
        );
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
    fn errors_name_the_kind_and_quote_the_pattern() {
        let err = parse(IdKind::Workspace, "WS").unwrap_err();
        assert_eq!(
            err.to_string(),
            "WorkspaceId \"WS\" does not match ^[a-z0-9][a-z0-9-]{0,62}$"
        );
    }
}
