//! Enums the spec names by a word: one macro writes their list, their
//! spelling and the lookup by word, so each enum states its words once.

/// `ALL` (every value, in the order given), `as_str` (the spec's word) and
/// `named` (the value a word names) for a unit enum.
macro_rules! spelled {
    ($ty:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in the order the spec documents them.
            pub const ALL: [$ty; [$($word),+].len()] = [$($ty::$variant),+];

            /// The spec's spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word,)+
                }
            }

            /// The value the spec's word names.
            pub fn named(word: &str) -> Option<$ty> {
                $ty::ALL.into_iter().find(|v| v.as_str() == word)
            }
        }
    };
}

pub(crate) use spelled;
