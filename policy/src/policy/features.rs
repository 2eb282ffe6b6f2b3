//! Features that may be dark, their states' copy, and the messages shown per error class.

use crate::Endpoint;

#[cfg(feature = "bake")]
use crate::bake::{Bake, Names, bake_struct, bake_unit_enum, endpoints};
#[cfg(feature = "bake")]
use proc_macro2::TokenStream;

/// A UI feature and the routes it depends on.
#[derive(Debug, Clone)]
pub struct FeaturePolicy {
    pub name: &'static str,
    pub routes: &'static [&'static Endpoint],
}

#[cfg(feature = "bake")]
impl Bake for FeaturePolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            FeaturePolicy {
                name,
                routes = endpoints(routes, n),
            }
        )
    }
}

/// A feature state with its German UI copy and what triggers it.
#[derive(Debug, Clone)]
pub struct FeatureStateCopy {
    pub state: &'static str,
    pub copy: Option<&'static str>,
    pub when: StateTrigger,
}

#[cfg(feature = "bake")]
impl Bake for FeatureStateCopy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, FeatureStateCopy { state, copy, when })
    }
}

/// What puts a feature in a state. Checked in this order: `Row` (the worst
/// news, e.g. dark or paused), `BreakerOpen`, `DeploySuspected`, `StageFailed`,
/// and `Otherwise` when nothing else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateTrigger {
    Otherwise,
    Row,
    BreakerOpen,
    DeploySuspected,
    StageFailed,
}

#[cfg(feature = "bake")]
bake_unit_enum!(StateTrigger {
    Otherwise,
    Row,
    BreakerOpen,
    DeploySuspected,
    StageFailed
});

/// German message shown for a final error of a class.
#[derive(Debug, Clone)]
pub struct ClassMessage {
    pub class: &'static str,
    pub copy: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for ClassMessage {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, ClassMessage { class, copy })
    }
}
