//! Rows that do not decode (written by a broken build, or a bit gone bad)
//! are set aside by the listings recovery depends on, and listed by
//! `damaged`, instead of failing the listing and the host with it. And
//! what a restore of a redb file keeps and renumbers.

use weft_store::{RedbStore, Store};

/// Writes rows that do not decode into the store file at `path`: at each
/// `(table, key)` of `rows`, and each of `running` in the index of running
/// runs.
fn put_broken(path: &std::path::Path, rows: &[(&str, &str)], running: &[&str]) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    for (table, key) in rows {
        let definition = redb::TableDefinition::<&str, &[u8]>::new(table);
        let mut rows = txn.open_table(definition).unwrap();
        rows.insert(*key, b"{not json".as_slice()).unwrap();
    }
    let index = redb::TableDefinition::<&str, ()>::new("running");
    for key in running {
        txn.open_table(index).unwrap().insert(*key, ()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn rows_that_do_not_decode_are_set_aside_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    drop(RedbStore::open(&path).unwrap());
    let rows = [
        ("outbox", "broken"),
        ("schedules", "broken"),
        ("runs", "broken"),
    ];
    put_broken(&path, &rows, &["broken"]);
    let store = RedbStore::open(&path).unwrap();
    assert!(store.outbox().unwrap().is_empty());
    assert!(store.schedules().unwrap().is_empty());
    assert!(store.running().unwrap().is_empty());
    let damaged = store.damaged().unwrap();
    let tables: Vec<&str> = damaged.iter().map(|d| d.table.as_str()).collect();
    assert_eq!(tables, ["runs", "outbox", "schedules"]);
    assert!(damaged.iter().all(|d| d.key == "broken"), "{damaged:?}");
    assert!(damaged[0].error.contains("broken"), "{damaged:?}");
}

#[test]
fn host_deployment_and_plugin_rows_that_do_not_decode_are_set_aside_and_all_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    drop(RedbStore::open(&path).unwrap());
    put_broken(&path, &[("hosts", "broken"), ("tenants", "broken")], &[]);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let deployments = redb::TableDefinition::<(&str, u32), &[u8]>::new("deployments");
        let plugins = redb::TableDefinition::<(&str, &str), &[u8]>::new("plugins");
        txn.open_table(deployments)
            .unwrap()
            .insert(("wf", 1), b"{not json".as_slice())
            .unwrap();
        txn.open_table(plugins)
            .unwrap()
            .insert(("p", "d"), b"{not json".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    // One bad row held start-up, or every take-over round, before: each
    // listing failed whole.
    let store = RedbStore::open(&path).unwrap();
    assert!(store.hosts().unwrap().is_empty());
    // A tenant's row is not set aside: its quota would be lifted. The
    // listing fails, naming the row.
    let refused = store.tenants().unwrap_err().to_string();
    assert!(refused.contains("broken"), "{refused}");
    assert!(store.deployments(None).unwrap().is_empty());
    assert!(store.plugins().unwrap().is_empty());
    let damaged: Vec<(String, String)> = store
        .damaged()
        .unwrap()
        .into_iter()
        .map(|d| (d.table, d.key))
        .collect();
    let expected = [
        ("hosts", "broken"),
        ("tenants", "broken"),
        ("deployments", "wf#1"),
        ("plugins", "p@d"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(table, key)| ((*table).to_owned(), (*key).to_owned()))
        .collect();
    assert_eq!(damaged, expected);
}

/// A run of tenant `acme`, stored through the store.
fn acme_run(store: &RedbStore, id: &str) {
    let mut run = crate::common::run(id);
    run.workflow = "acme:wf".to_owned();
    let write =
        weft_store::Write::create_run(&run, &crate::common::def("d0", "id: wf"), Vec::new());
    store.apply(&[&write]).unwrap();
}

fn acme() -> weft_store::RunFilter {
    weft_store::RunFilter {
        tenant: Some("acme".to_owned()),
        ..weft_store::RunFilter::default()
    }
}

/// The ids of tenant `acme`'s runs, newest first.
fn acme_listed(store: &RedbStore) -> Vec<String> {
    store
        .runs(&acme(), 10)
        .unwrap()
        .into_iter()
        .map(|run| run.id)
        .collect()
}

/// Makes the store file at `path` as a file of the build before the index
/// of runs: no index, and no mark of it.
fn as_before_the_index(path: &std::path::Path) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    let index = redb::TableDefinition::<(&str, &str), ()>::new("tenant_runs");
    assert!(txn.delete_table(index).unwrap());
    let meta = redb::TableDefinition::<&str, &str>::new("meta");
    txn.open_table(meta).unwrap().remove("tenant_runs").unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_tenants_listing_reads_no_row_of_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    acme_run(&RedbStore::open(&path).unwrap(), "r1");
    put_broken(&path, &[("runs", "r0")], &[]);
    let store = RedbStore::open(&path).unwrap();
    // Every tenant's listing reads the broken row and fails; `acme`'s
    // never reads it.
    assert!(store.runs(&weft_store::RunFilter::default(), 10).is_err());
    let listed = acme_listed(&store);
    assert_eq!(listed, ["r1"]);
}

#[test]
fn a_file_made_before_the_index_of_runs_gets_it_on_opening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        acme_run(&store, "r1");
        acme_run(&store, "r2");
    }
    as_before_the_index(&path);
    let store = RedbStore::open(&path).unwrap();
    let listed = acme_listed(&store);
    assert_eq!(listed, ["r2", "r1"]);
}

#[test]
fn a_backup_made_before_the_index_of_runs_restores_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        acme_run(&store, "r1");
    }
    as_before_the_index(&path);
    let backup = dir.path().join("backup.redb");
    {
        // Read as it is: opening it for writing would fill the index.
        let old = RedbStore::open_read_only(&path).unwrap();
        old.backup(&backup).unwrap();
    }
    let restored = dir.path().join("restored.redb");
    RedbStore::restore(&backup, &restored).unwrap();
    let store = RedbStore::open(&restored).unwrap();
    let listed = acme_listed(&store);
    assert_eq!(listed, ["r1"]);
}

/// A claim of a run whose row does not decode is refused alone: the
/// claims of a resume share a batch, and the others in it land.
#[test]
fn a_claim_of_a_run_that_does_not_decode_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    {
        // Without a lease: free, as a host that stopped leaves its runs.
        acme_run(&RedbStore::open(&path).unwrap(), "good");
    }
    put_broken(&path, &[("runs", "broken")], &[]);
    let store = RedbStore::open(&path).unwrap();
    let lease = weft_store::Lease::after(None, "h2");
    let claim = |run: &str| weft_store::Write::Claim {
        run: run.to_owned(),
        lease: lease.clone(),
    };
    let results = store.apply(&[&claim("broken"), &claim("good")]).unwrap();
    assert!(
        matches!(results[0], Err(weft_store::Refused::Unreadable { .. })),
        "{results:?}"
    );
    assert!(results[1].is_ok(), "{results:?}");
    assert_eq!(store.lease("good").unwrap(), Some(lease));
}

/// A trigger's row that does not decode never fires (listings set it
/// aside); the sync of a workflow that declares the trigger makes it again
/// with "no row yet" (version 0), which replaces it rather than failing
/// the sync, and start-up with it.
#[test]
fn a_trigger_row_that_does_not_decode_is_replaced_by_one_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    drop(RedbStore::open(&path).unwrap());
    put_broken(&path, &[("schedules", "wf/nightly")], &[]);
    let store = RedbStore::open(&path).unwrap();
    let row: weft_store::ScheduleRecord = serde_json::from_value(serde_json::json!({
        "key": "wf/nightly", "workflow": "wf", "spec": { "cron": "0 * * * * *" }, "origin": "workflow",
        "next_fire": 60_000, "version": 1,
    }))
    .unwrap();
    let made = weft_store::Write::schedule(&row, Some(0), None);
    let answers = store.apply(&[&made]).unwrap();
    assert!(
        matches!(answers.as_slice(), [Ok(())]),
        "the trigger was not made again: {answers:?}"
    );
    assert_eq!(store.schedules().unwrap(), [row]);
    assert!(store.damaged().unwrap().is_empty());
}

/// A host whose row does not decode is set aside by the listing of hosts,
/// so no host judges it gone and forgets its row: its runs are free all
/// the same, and a claim takes one.
#[test]
fn the_runs_of_a_host_whose_row_does_not_decode_are_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    let first = weft_store::Lease::after(None, "h1");
    {
        let store = RedbStore::open(&path).unwrap();
        acme_run(&store, "r1");
        let claim = weft_store::Write::Claim {
            run: "r1".to_owned(),
            lease: first.clone(),
        };
        store.apply(&[&claim]).unwrap().remove(0).unwrap();
    }
    put_broken(&path, &[("hosts", "h1")], &[]);
    let store = RedbStore::open(&path).unwrap();
    assert!(store.hosts().unwrap().is_empty(), "the row is set aside");
    let second = weft_store::Lease::after(Some(&first), "h2");
    let claim = weft_store::Write::Claim {
        run: "r1".to_owned(),
        lease: second.clone(),
    };
    let results = store.apply(&[&claim]).unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(store.lease("r1").unwrap(), Some(second));
}

/// The seq of every message, in order.
fn seqs(s: &dyn Store) -> Vec<u64> {
    let messages = s.messages_from(0, usize::MAX).unwrap();
    messages.into_iter().map(|m| m.seq).collect()
}

/// A restore numbers messages above any number the store backed up gave
/// after its backup: a consumer resuming from one of those (an SSE
/// `Last-Event-ID`) would otherwise take the new messages as seen.
#[test]
fn a_restored_store_numbers_messages_above_any_given_since_its_backup() {
    use crate::common::{emission, emit};
    use crate::messages::emitted;
    use crate::table::put;
    let dir = tempfile::tempdir().unwrap();
    let (path, backup) = (dir.path().join("weft.redb"), dir.path().join("backup.redb"));
    let live = RedbStore::open(&path).unwrap();
    emitted(&live);
    live.backup(&backup).unwrap();
    put(&live, emit(&live, vec![emission("m2", "ch")]));
    put(&live, emit(&live, vec![emission("m3", "ch")]));
    let held = *seqs(&live).last().unwrap();
    assert_eq!(held, 3, "the live store went on numbering");

    let restored_path = dir.path().join("restored.redb");
    RedbStore::restore(&backup, &restored_path).unwrap();
    let restored = RedbStore::open(&restored_path).unwrap();
    assert_eq!(
        seqs(&restored),
        [1],
        "the backup holds the first message only"
    );
    put(&restored, emit(&restored, vec![emission("m4", "ch")]));
    put(&restored, emit(&restored, vec![emission("m5", "ch")]));
    let after = seqs(&restored);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        after[1] > held,
        "a new message numbered {} ≤ {held}",
        after[1]
    );
    assert_eq!(after[2], after[1] + 1, "numbers follow on from the floor");

    // Restored again from the same backup, later: above the first
    // restore's numbers too.
    drop(restored);
    let again_path = dir.path().join("again.redb");
    RedbStore::restore(&backup, &again_path).unwrap();
    let again = RedbStore::open(&again_path).unwrap();
    put(&again, emit(&again, vec![emission("m6", "ch")]));
    let numbered = *seqs(&again).last().unwrap();
    assert!(numbered > after[2], "{numbered} ≤ {}", after[2]);
}
