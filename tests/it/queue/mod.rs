//! The job store (`sdk-queue`) on SQLite and PostgreSQL: one suite of cases
//! run against each store, and what only one of them has.

mod cases;
mod pg_mixed_versions;
mod pg_store;
mod pg_two_processes;
mod sqlite_erasure;
mod sqlite_space;
mod sqlite_store;
mod suite;
