//! The rules an ID must follow before it is sent.

/// What an ID must look like.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct IdRules {
    /// The pattern the IDs the client chooses follow (spec `ids.pattern`).
    pub pattern: IdPattern<'static>,
    /// Tenants refused before a byte is sent (the platform's own tenants).
    pub reserved_tenants: &'static [&'static str],
    /// ID types the platform mints: checked only to be safe in a path, not
    /// against [`pattern`](Self::pattern).
    pub opaque: &'static [&'static str],
    /// Longest opaque ID, in bytes.
    pub opaque_max_len: usize,
}

/// An ID pattern `^[first][rest]{min,max}$`, lowered by the generator into
/// byte ranges so that checking an ID needs no regex engine: one pass over
/// its bytes, each looked up in a handful of ranges.
///
/// The classes hold ASCII only, so a valid ID is as many bytes as characters.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct IdPattern<'a> {
    /// The pattern as the spec wrote it, quoted by [`InvalidId`](crate::InvalidId).
    pub text: &'a str,
    /// The bytes the first character may be: inclusive ranges.
    #[bake(with = crate::bake::byte_ranges)]
    pub first: &'a [(u8, u8)],
    /// The bytes every later character may be: inclusive ranges.
    #[bake(with = crate::bake::byte_ranges)]
    pub rest: &'a [(u8, u8)],
    /// Shortest and longest ID, in bytes (the first character included).
    pub min_len: usize,
    pub max_len: usize,
}

impl IdPattern<'_> {
    /// Whether `value` matches the pattern, its length included.
    pub fn matches(&self, value: &str) -> bool {
        let bytes = value.as_bytes();
        let in_class = |class: &[(u8, u8)], b: u8| class.iter().any(|&(lo, hi)| lo <= b && b <= hi);
        match bytes.split_first() {
            Some((&first, rest)) => {
                (self.min_len..=self.max_len).contains(&bytes.len())
                    && in_class(self.first, first)
                    && rest.iter().all(|&b| in_class(self.rest, b))
            }
            None => false,
        }
    }
}
