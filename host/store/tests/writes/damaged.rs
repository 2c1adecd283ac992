//! Rows that do not decode (written by a broken build, or a bit gone bad)
//! are set aside by the listings recovery depends on, and listed by
//! `damaged`, instead of failing the listing and the host with it.

use weft_store::{RedbStore, Store};

#[test]
fn rows_that_do_not_decode_are_set_aside_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.redb");
    drop(RedbStore::open(&path).unwrap());
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        for table in ["outbox", "schedules", "runs"] {
            let definition = redb::TableDefinition::<&str, &[u8]>::new(table);
            let mut rows = txn.open_table(definition).unwrap();
            rows.insert("broken", b"{not json".as_slice()).unwrap();
        }
        let running = redb::TableDefinition::<&str, ()>::new("running");
        txn.open_table(running)
            .unwrap()
            .insert("broken", ())
            .unwrap();
        txn.commit().unwrap();
    }
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
