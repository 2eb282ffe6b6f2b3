//! [`id_newtype!`](crate::id_newtype): the newtype a generated crate declares
//! per ID, written once here instead of once per ID type.

/// Declares a validated ID newtype over [`Id`](sdk_policy::Id): the only way to
/// get one is `parse` (or `FromStr`, or deserializing), which checks the
/// value against the API's [`IdRules`](sdk_policy::policy::IdRules).
///
/// ```
/// use sdk_runtime::policy::{IdPattern, IdRules};
/// use sdk_runtime::{Id, IdKind, id_newtype};
///
/// // A generated crate passes `POLICY.ids`, lowered from its spec.
/// static RULES: IdRules = IdRules {
///     pattern: IdPattern {
///         text: "^[a-z][a-z0-9-]{0,62}$",
///         first: &[(b'a', b'z')],
///         rest: &[(b'a', b'z'), (b'0', b'9'), (b'-', b'-')],
///         min_len: 1,
///         max_len: 63,
///     },
///     reserved_tenants: &[],
///     opaque: &[],
///     opaque_max_len: 256,
/// };
///
/// id_newtype! {
///     /// A note.
///     pub struct NoteId(Id) {
///         kind: IdKind::Other("NoteId"),
///         rules: RULES,
///     }
/// }
///
/// assert_eq!(NoteId::parse("note-7")?.as_str(), "note-7");
/// assert!(NoteId::parse("Note_7").is_err());
/// # Ok::<(), sdk_runtime::InvalidId>(())
/// ```
///
/// The field is always `(Id)`, the [`Id`](sdk_policy::Id) as the caller names it,
/// taken as written so that a compile error about it (it is private) points
/// at the caller's declaration, not into this macro. Private, because code
/// outside the declaring module must not wrap an `Id` validated under other
/// rules. `kind` is the [`IdKind`](sdk_policy::IdKind)
/// the value is checked as and `rules` the `IdRules` it is checked against.
///
/// The type gets `parse`, `as_str`, `id` (the runtime's view), `Display`,
/// `Debug` (`KbId("kb-7")`), `FromStr`, and `Serialize`/`Deserialize` as a
/// plain string; an ID in a response is validated like any other, so a bad
/// one is a decode error. It derives `Clone`, `Eq`, `Ord` and `Hash`.
#[macro_export]
macro_rules! id_newtype {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident $field:tt {
            kind: $kind:expr,
            rules: $rules:expr $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name $field;

        impl $name {
            /// Validates `value`; nothing unvalidated ever reaches a header or a path.
            pub fn parse(value: &str) -> ::core::result::Result<Self, $crate::InvalidId> {
                $crate::Id::parse(&$rules, $kind, value).map(Self)
            }

            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }

            /// The runtime's view of this ID.
            pub fn id(&self) -> &$crate::Id {
                &self.0
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Display::fmt(&self.0, f)
            }
        }

        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl ::core::str::FromStr for $name {
            type Err = $crate::InvalidId;

            fn from_str(value: &str) -> ::core::result::Result<Self, $crate::InvalidId> {
                Self::parse(value)
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error>
            where
                S: $crate::__private::serde::Serializer,
            {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::__private::serde::Deserialize<'de> for $name {
            /// An ID in a response is validated like any other: a bad one is a decode error.
            fn deserialize<D>(deserializer: D) -> ::core::result::Result<Self, D::Error>
            where
                D: $crate::__private::serde::Deserializer<'de>,
            {
                let value: ::std::string::String =
                    $crate::__private::serde::Deserialize::deserialize(deserializer)?;
                Self::parse(&value).map_err($crate::__private::serde::de::Error::custom)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use sdk_policy::Id;
    use sdk_policy::IdKind;
    use sdk_policy::InvalidId;
    use sdk_policy::policy::{IdPattern, IdRules};

    static RULES: IdRules = IdRules {
        pattern: IdPattern {
            text: "^[a-z][a-z_]{0,9}$",
            first: &[(b'a', b'z')],
            rest: &[(b'a', b'z'), (b'_', b'_')],
            min_len: 1,
            max_len: 10,
        },
        reserved_tenants: &["root"],
        opaque: &[],
        opaque_max_len: 64,
    };

    crate::id_newtype! {
        /// An ID declared the way a generated crate declares one.
        pub struct ToyId(Id) {
            kind: IdKind::Other("ToyId"),
            rules: RULES,
        }
    }

    crate::id_newtype! {
        pub(crate) struct ToyTenant(Id) {
            kind: IdKind::Tenant,
            rules: RULES,
        }
    }

    #[test]
    fn the_newtype_validates_every_way_in() {
        let id = ToyId::parse("toy_7").unwrap_err();
        assert!(matches!(id, InvalidId::Pattern { kind: "ToyId", .. }));
        let id = ToyId::parse("toy_id").unwrap();
        assert_eq!(id.as_str(), "toy_id");
        assert_eq!(id.id().kind(), IdKind::Other("ToyId"));
        assert_eq!(id.to_string(), "toy_id");
        assert_eq!(format!("{id:?}"), "ToyId(\"toy_id\")");
        assert_eq!("toy_id".parse::<ToyId>().unwrap(), id);
        assert!("Toy".parse::<ToyId>().is_err());
        let json = serde_json::to_value(&id).unwrap();
        assert_eq!(json, serde_json::json!("toy_id"));
        assert_eq!(serde_json::from_value::<ToyId>(json).unwrap(), id);
        let err = serde_json::from_value::<ToyId>(serde_json::json!("toy-id")).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not match ^[a-z][a-z_]{0,9}$"),
            "{err}"
        );
        // The kind decides the extra checks: `root` is a reserved tenant.
        assert!(ToyId::parse("root").is_ok());
        assert!(matches!(
            ToyTenant::parse("root"),
            Err(InvalidId::ReservedTenant { .. })
        ));
        assert_eq!(
            ToyTenant::parse("acme").unwrap().id().kind(),
            IdKind::Tenant
        );
    }
}
