//! One API's error: the runtime's [`Error`] with its class read as that
//! API's own enum. Every generated crate needs the same wrapper, so it is
//! written once here and a crate names it (`pub type Error = ApiError<ErrorClass>`).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use sdk_policy::Endpoint;

use crate::error::Error;

/// An API's error classes, as the generated crate's `ErrorClass` enum holds
/// them: what [`ApiError::class`] needs to read a row as a variant.
pub trait ErrorClasses: Copy + 'static {
    /// The API's route table (`policy::ENDPOINTS`): an error is read as one
    /// of these classes only when the policy that classified it has this
    /// very table, so an error another API's client classified never is. A
    /// policy override (a scaled copy) keeps the table, so its errors are
    /// read too.
    const ROUTES: &'static [&'static Endpoint];
    /// The class of each taxonomy row, by the row's index.
    const BY_ROW: &'static [Self];
    /// The class of an error no row of this API classified.
    const UNCLASSIFIED: Self;
}

/// A failed call of one API: the runtime's [`Error`] (every accessor through
/// `Deref`), its class an `ErrorClass` of that API. Two APIs' errors are two
/// types: one is never read as the other's classes.
pub struct ApiError<C> {
    error: Error,
    /// `fn() -> C`: the class is only read out, so the error stays `Send`
    /// and `Sync` whatever the enum.
    classes: PhantomData<fn() -> C>,
}

impl<C: ErrorClasses> ApiError<C> {
    /// The taxonomy class: the class of the row that classified the
    /// error (by its index), the unclassified one when none did. An error
    /// another API's client classified (a runtime error converted by hand)
    /// is unclassified too, never one of this API's classes.
    pub fn class(&self) -> C {
        match self.error.row_index() {
            Some(row) if same_table(self.error.policy().routes, C::ROUTES) => {
                C::BY_ROW.get(row.get()).copied().unwrap_or(C::UNCLASSIFIED)
            }
            _ => C::UNCLASSIFIED,
        }
    }
}

/// Whether two route tables are the same statics, one for one: what an
/// override must keep ([`crate::Client::with_override`]) and what an API's
/// classes recognise an error by.
pub(crate) fn same_table(a: &[&'static Endpoint], b: &[&'static Endpoint]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| std::ptr::eq(*x, *y))
}

impl<C> ApiError<C> {
    /// The runtime's error.
    pub fn into_inner(self) -> Error {
        self.error
    }
}

impl<C> Deref for ApiError<C> {
    type Target = Error;

    fn deref(&self) -> &Error {
        &self.error
    }
}

/// A runtime error of a call of this API (a stream's, a raw call's).
impl<C> From<Error> for ApiError<C> {
    fn from(error: Error) -> Self {
        ApiError {
            error,
            classes: PhantomData,
        }
    }
}

impl<C> From<ApiError<C>> for Error {
    fn from(error: ApiError<C>) -> Self {
        error.error
    }
}

impl<C> fmt::Display for ApiError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<C> fmt::Debug for ApiError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl<C> std::error::Error for ApiError<C> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}
