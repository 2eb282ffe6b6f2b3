//! The store suite against each store: the same cases, written once in `support::cases`.

mod support;

mod sqlite {
    crate::suite!(crate::support::Sqlite::new());
}

mod postgres {
    crate::suite!(crate::support::Pg::new());
}
