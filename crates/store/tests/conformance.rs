//! One conformance suite for every [`Store`] backend: each case is written once, as an
//! `async fn(Arc<dyn Store>)` in a module under `conformance/`, and [`conformance!`] turns the
//! list of cases into one `#[tokio::test]` per backend, named `<backend>::<module>::<case>`
//! (run one backend with `cargo test -p skiff-store --test conformance etcd::`).
//!
//! Real etcd is the oracle: every expectation here was checked against etcd 3.4.23, and where a
//! backend disagrees with etcd the backend is wrong. Each test gets a fresh store (for etcd: its
//! own `etcd` process and a key prefix named after the case), so absolute revisions are known.
//!
//! # Layout
//! - `conformance/support.rs`: helpers (writes, reads, watch reads with a deadline, polling).
//! - `conformance/kv.rs`: revisions, versions, ranges, puts and deletes, limits and empty keys.
//! - `conformance/txn.rs`: compares, branches, one revision per txn, duplicate keys.
//! - `conformance/watch.rs`: replay from a revision, live events, compacted starts, progress.
//! - `conformance/compaction.rs`: reads and compactions around the compact revision.
//! - `conformance/lease.rs`: grant, attach, time-to-live, keep-alive, revoke, expiry.
//! - `conformance/etcd_only.rs`: what only the etcd backend has (prefix isolation, process
//!   cleanup, watch cancellation seen from etcd).

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use skiff_store::Store;

#[path = "conformance/compaction.rs"]
mod compaction;
#[path = "conformance/etcd_only.rs"]
mod etcd_only;
#[path = "conformance/kv.rs"]
mod kv;
#[path = "conformance/lease.rs"]
mod lease;
#[path = "conformance/support.rs"]
mod support;
#[path = "conformance/txn.rs"]
mod txn;
#[path = "conformance/watch.rs"]
mod watch;

/// A store under test and whatever must outlive it (an etcd process, a temp dir). Fields drop in
/// order: the store first, then the guard.
struct Fixture {
    store: Arc<dyn Store>,
    _guard: Box<dyn Any + Send>,
}

/// A case that does not finish in this time has hung (a missing event, a lost wakeup).
const CASE_DEADLINE: Duration = Duration::from_secs(120);

async fn run<F, Fut>(fixture: Fixture, case: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    let store = fixture.store.clone();
    if tokio::time::timeout(CASE_DEADLINE, case(store))
        .await
        .is_err()
    {
        panic!("case did not finish within {CASE_DEADLINE:?}");
    }
    drop(fixture);
}

mod backends {
    use super::*;

    /// Real etcd: one process per test, keys under `/conformance/<case>/`.
    pub async fn etcd(case: &str) -> Fixture {
        let etcd = skiff_store::etcd_process::EtcdProcess::start()
            .await
            .expect("start etcd");
        let prefix = format!("/conformance/{case}/");
        let store = skiff_store::etcd::EtcdStore::connect(&[etcd.endpoint()], prefix)
            .await
            .expect("connect to etcd");
        Fixture {
            store: Arc::new(store),
            _guard: Box::new(etcd),
        }
    }

    /// The embedded store in a fresh temp dir.
    pub async fn embedded(_case: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = skiff_store::EmbeddedConfig::new(dir.path());
        let store = skiff_store::EmbeddedStore::open(config)
            .await
            .expect("open embedded store");
        Fixture {
            store: Arc::new(store),
            _guard: Box::new(dir),
        }
    }

    /// The embedded store behind Skiff's own etcd v3 gRPC facade, reached through the etcd
    /// backend (`etcd-client`): checks the facade and the embedded store together, over the wire.
    pub async fn embedded_grpc(case: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = skiff_store::EmbeddedConfig::new(dir.path());
        let embedded = skiff_store::EmbeddedStore::open(config)
            .await
            .expect("open embedded store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let endpoint = listener.local_addr().expect("local addr").to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(skiff_store::grpc::serve(embedded, listener, async {
            let _ = stopped.await;
        }));
        let prefix = format!("/conformance/{case}/");
        let store = skiff_store::etcd::EtcdStore::connect(&[endpoint], prefix)
            .await
            .expect("connect to the facade");
        Fixture {
            store: Arc::new(store),
            _guard: Box::new((
                ServerGuard {
                    stop: Some(stop),
                    server,
                },
                dir,
            )),
        }
    }

    /// Stops the in-process facade when the fixture is dropped.
    struct ServerGuard {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        server: tokio::task::JoinHandle<Result<(), skiff_store::grpc::ServeError>>,
    }

    impl Drop for ServerGuard {
        fn drop(&mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            self.server.abort();
        }
    }
}

/// `conformance!(backend_name, fixture_fn)`: a module `backend_name` with one test per case,
/// each calling `fixture_fn(case_name).await` for a fresh store.
macro_rules! conformance {
    ($backend:ident, $fixture:path) => {
        conformance!(@expand $backend, $fixture, {
            kv: [
                fresh_store_starts_at_revision_1,
                every_write_increments_the_global_revision_by_one,
                put_sets_create_and_mod_revision_and_counts_versions,
                delete_resets_the_version_and_recreating_gets_a_new_create_revision,
                deleting_nothing_creates_no_revision,
                range_of_one_key_returns_it_or_nothing,
                range_by_prefix_returns_keys_in_ascending_order,
                range_from_key_with_end_zero_returns_every_later_key,
                range_with_an_explicit_end_is_half_open,
                range_with_limit_reports_more_and_the_full_count,
                range_at_a_past_revision_sees_history,
                range_count_only_returns_the_count_without_kvs,
                range_keys_only_returns_keys_without_values,
                range_at_a_future_revision_fails_with_future_revision,
                range_with_an_empty_prefix_covers_every_key,
                empty_key_is_rejected_with_empty_key,
                put_with_prev_kv_returns_the_previous_version,
                delete_with_prev_kv_returns_every_deleted_key_in_one_revision,
                value_over_the_size_limit_fails_and_writes_nothing,
                empty_value_is_stored,
                status_reports_the_revision_of_the_last_write,
            ],
            txn: [
                create_if_absent_runs_once,
                update_if_unchanged_guards_on_mod_revision,
                delete_if_unchanged_guards_on_mod_revision,
                compares_each_target_with_each_operator,
                compares_on_a_missing_key_see_zeroes_and_fail_on_value,
                compare_over_a_range_must_hold_for_every_key,
                failure_branch_runs_when_any_compare_fails,
                writes_share_one_revision,
                range_sees_earlier_writes_of_the_same_txn,
                txn_without_writes_creates_no_revision,
                duplicate_key_fails_with_duplicate_key_and_writes_nothing,
            ],
            watch: [
                key_from_a_past_revision_replays_every_event_then_live_ones,
                prefix_from_a_past_revision_delivers_every_event_in_order,
                from_revision_zero_gets_only_new_events,
                from_a_future_revision_starts_there,
                ignores_keys_outside_its_range,
                range_delete_arrives_as_deletes_sharing_one_revision,
                from_a_compacted_revision_yields_compacted_then_ends,
                progress_request_yields_an_empty_batch_at_or_after_the_last_write,
            ],
            compaction: [
                reads_below_the_compact_revision_fail_with_compacted,
                compacting_at_or_below_the_compact_revision_fails_with_compacted,
                compacting_beyond_the_current_revision_fails_with_future_revision,
                compaction_keeps_the_latest_version_of_every_key,
            ],
            lease: [
                grant_attaches_keys_and_time_to_live_lists_them,
                grant_with_a_chosen_id_uses_it_and_refuses_a_duplicate,
                keep_alive_renews_to_the_granted_ttl,
                revoke_deletes_attached_keys_in_one_revision_and_watchers_see_it,
                expiry_deletes_attached_keys,
                put_with_an_unknown_lease_fails_with_lease_not_found,
                operations_on_an_unknown_lease_fail_with_lease_not_found,
                put_without_a_lease_detaches_the_key,
                lease_list_shows_live_leases_only,
            ],
        });
    };
    (@expand $backend:ident, $fixture:path,
     { $($module:ident: [$($case:ident),* $(,)?]),* $(,)? }) => {
        mod $backend {
            $(
                mod $module {
                    $(
                        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                        async fn $case() {
                            let fixture = $fixture(stringify!($case)).await;
                            crate::run(fixture, crate::$module::$case).await;
                        }
                    )*
                }
            )*
        }
    };
}

conformance!(etcd, crate::backends::etcd);
conformance!(embedded, crate::backends::embedded);
conformance!(embedded_grpc, crate::backends::embedded_grpc);
