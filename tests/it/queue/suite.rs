//! The store suite against each store: the same cases, written once in `cases`.

/// Writes each test case once for a backend: `cases!(make_harness; case_a, case_b)`.
macro_rules! cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(h) = $make.await else { return };
                crate::queue::cases::$case(&h).await;
                crate::kit::stores::Harness::teardown(h).await;
            }
        )*
    };
}

/// Every case of the suite, for `cases!`.
macro_rules! suite {
    ($make:expr) => {
        cases!($make;
            submit_is_idempotent,
            claim_takes_the_oldest_of_the_kinds_asked,
            not_before_holds_a_replay_back,
            an_expired_lease_is_taken_over,
            the_old_owner_loses_the_lease,
            finish_sets_each_end_state,
            claim_key_takes_only_an_eligible_job,
            depth_counts_every_job_not_done,
            list_gives_the_oldest_first,
            corrupt_rows_are_typed_errors,
            concurrent_claimers_never_share_a_job,
            requeue_revives_only_a_failed_job,
            rerun_revives_only_a_done_job_from_the_given_checkpoint,
            forget_erases_a_job_in_any_state_but_one_another_holds,
            footprint_counts_rows_and_payload_bytes_per_state,
            prune_deletes_ended_jobs_past_their_age_in_batches_and_spares_the_rest,
        );
    };
}

mod sqlite {
    suite!(crate::kit::stores::Sqlite::new());
}

mod postgres {
    suite!(crate::kit::stores::Pg::new());
}
