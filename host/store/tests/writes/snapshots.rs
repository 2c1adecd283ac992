//! Snapshot stores: `StageSnapshot` pages land under a data id and refuse
//! a key staged already; `SealSnapshot` makes them the store's next
//! revision and refuses a number taken; `DeleteSnapshot` refuses the
//! newest and drops the data; `DropSnapshotEntries` deletes a dropped
//! data's entries, and only the expired ones of a sealed revision;
//! `ForgetSnapshotData` deletes a dropped data's row, never a sealed one.

use weft_core::Timestamp;
use weft_store::{DataState, Refused, SnapshotEntry, SnapshotRecord, Store, What, Write};

use crate::table::{open, put};

const AT: Timestamp = Timestamp(1_000_000);

fn apply(s: &dyn Store, write: Write) -> Result<(), Refused> {
    s.apply(&[&write]).unwrap().pop().unwrap()
}

fn entry(value: &str, expires_at: Option<u64>) -> Vec<u8> {
    SnapshotEntry {
        value: value.to_owned(),
        expires_at,
    }
    .encode()
}

fn stage(data: &str, keys: &[(&str, Option<u64>)]) -> Write {
    stage_at(data, keys, false)
}

fn first(data: &str, keys: &[(&str, Option<u64>)]) -> Write {
    stage_at(data, keys, true)
}

fn stage_at(data: &str, keys: &[(&str, Option<u64>)], first: bool) -> Write {
    Write::StageSnapshot {
        data: data.to_owned(),
        store: "prices".to_owned(),
        at: AT,
        first,
        entries: keys
            .iter()
            .map(|(k, expires)| ((*k).to_owned(), entry("1", *expires)))
            .collect(),
    }
}

fn record(data: &str, revision: u32) -> SnapshotRecord {
    SnapshotRecord {
        store: "prices".to_owned(),
        revision,
        digest: format!("sha256:{data}"),
        data: data.to_owned(),
        entries: 0,
        bytes: 0,
        expiring: 0,
        published_at: AT,
        ttl_ms: None,
        keep: 5,
        keep_for_ms: None,
        origin: "test".to_owned(),
    }
}

fn keys(s: &dyn Store, data: &str) -> Vec<String> {
    s.snapshot_entries(data, None, "", 100)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn state(s: &dyn Store, data: &str) -> Option<DataState> {
    s.snapshot_data()
        .unwrap()
        .into_iter()
        .find(|(d, _)| d == data)
        .map(|(_, row)| row.state)
}

#[test]
fn a_revision_is_staged_in_pages_then_sealed_with_the_next_number() {
    let (_dir, s) = open();
    // A later page with no first one, and a second first page, are
    // refused: a publish's data is its own.
    let refused = apply(&*s, stage("d1", &[("a", None)]));
    assert!(matches!(refused, Err(Refused::Changed(_))), "{refused:?}");
    put(&*s, first("d1", &[("a", None), ("b", Some(5))]));
    let refused = apply(&*s, first("d1", &[("x", None)]));
    assert!(matches!(refused, Err(Refused::Changed(_))), "{refused:?}");
    put(&*s, stage("d1", &[("c", None)]));
    assert_eq!(state(&*s, "d1"), Some(DataState::Staging));
    assert!(
        s.snapshots(Some("prices")).unwrap().is_empty(),
        "not readable before its seal"
    );
    // A key staged already is refused, with nothing of the page stored.
    let refused = apply(&*s, stage("d1", &[("d", None), ("a", None)]));
    assert!(
        matches!(&refused, Err(Refused::Exists(What::SnapshotKey(k))) if k == "a"),
        "{refused:?}"
    );
    assert_eq!(keys(&*s, "d1"), ["a", "b", "c"]);
    // Only the next number seals.
    let refused = apply(&*s, Write::SealSnapshot(Box::new(record("d1", 2))));
    assert!(matches!(refused, Err(Refused::Exists(_))), "{refused:?}");
    put(&*s, Write::SealSnapshot(Box::new(record("d1", 1))));
    assert_eq!(state(&*s, "d1"), Some(DataState::Sealed));
    assert_eq!(s.snapshots(Some("prices")).unwrap(), [record("d1", 1)]);
    // Sealed data takes no more pages, and is sealed once.
    let refused = apply(&*s, stage("d1", &[("e", None)]));
    assert!(matches!(refused, Err(Refused::Changed(_))), "{refused:?}");
    let refused = apply(&*s, Write::SealSnapshot(Box::new(record("d1", 2))));
    assert!(matches!(refused, Err(Refused::Changed(_))), "{refused:?}");
    assert_eq!(
        s.snapshot_entry("d1", "b").unwrap(),
        Some(SnapshotEntry {
            value: "1".to_owned(),
            expires_at: Some(5)
        })
    );
    assert_eq!(
        s.snapshot_entries("d1", Some("a"), "", 10)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>(),
        ["b", "c"]
    );
}

#[test]
fn the_newest_revision_stays_and_a_deleted_one_s_entries_go_then_its_row() {
    let (_dir, s) = open();
    put(&*s, first("d1", &[("a", None), ("b", None)]));
    put(&*s, Write::SealSnapshot(Box::new(record("d1", 1))));
    let newest = apply(
        &*s,
        Write::DeleteSnapshot {
            store: "prices".to_owned(),
            revision: 1,
        },
    );
    assert!(matches!(newest, Err(Refused::Needed { .. })), "{newest:?}");
    put(&*s, first("d2", &[("a", Some(10)), ("b", None)]));
    put(&*s, Write::SealSnapshot(Box::new(record("d2", 2))));
    // A sealed revision's row stays, and only its expired entries go.
    let forget = apply(
        &*s,
        Write::ForgetSnapshotData {
            data: "d1".to_owned(),
            now: AT,
        },
    );
    assert!(matches!(forget, Err(Refused::Needed { .. })), "{forget:?}");
    let drop_all = |data: &str, now: u64| Write::DropSnapshotEntries {
        data: data.to_owned(),
        keys: vec!["a".to_owned(), "b".to_owned()],
        now: Timestamp(now),
    };
    put(&*s, drop_all("d1", 20));
    put(&*s, drop_all("d2", 9));
    assert_eq!(keys(&*s, "d1"), ["a", "b"]);
    assert_eq!(keys(&*s, "d2"), ["a", "b"]);
    put(&*s, drop_all("d2", 10));
    assert_eq!(keys(&*s, "d2"), ["b"], "an expired entry goes");

    put(
        &*s,
        Write::DeleteSnapshot {
            store: "prices".to_owned(),
            revision: 1,
        },
    );
    assert_eq!(s.snapshots(Some("prices")).unwrap(), [record("d2", 2)]);
    assert_eq!(state(&*s, "d1"), Some(DataState::Dropped));
    let gone = apply(
        &*s,
        Write::DeleteSnapshot {
            store: "prices".to_owned(),
            revision: 1,
        },
    );
    assert!(matches!(gone, Err(Refused::NotFound(_))), "{gone:?}");
    put(&*s, drop_all("d1", 0));
    assert!(keys(&*s, "d1").is_empty());
    put(
        &*s,
        Write::ForgetSnapshotData {
            data: "d1".to_owned(),
            now: AT,
        },
    );
    assert_eq!(state(&*s, "d1"), None);
}

#[test]
fn a_failed_publish_is_dropped_at_once_or_after_an_hour_without_a_page() {
    let (_dir, s) = open();
    put(&*s, first("d1", &[("a", None)]));
    put(&*s, first("d2", &[("a", None)]));
    // Within the hour a publish may go on: its entries stay.
    let hour = weft_store::snapshots::ABANDONED_AFTER_MS;
    let drop_at = |data: &str, now: u64| Write::DropSnapshotEntries {
        data: data.to_owned(),
        keys: vec!["a".to_owned()],
        now: Timestamp(now),
    };
    put(&*s, drop_at("d1", AT.0 + hour - 1));
    assert_eq!(keys(&*s, "d1"), ["a"]);
    put(&*s, drop_at("d1", AT.0 + hour));
    assert!(keys(&*s, "d1").is_empty());
    // Its row goes too, and a page of the publish that comes back late is
    // refused rather than making the row again.
    put(
        &*s,
        Write::ForgetSnapshotData {
            data: "d1".to_owned(),
            now: Timestamp(AT.0 + hour),
        },
    );
    let late = apply(&*s, stage("d1", &[("b", None)]));
    assert!(matches!(late, Err(Refused::Changed(_))), "{late:?}");
    put(&*s, Write::AbandonSnapshot("d2".to_owned()));
    assert_eq!(state(&*s, "d2"), Some(DataState::Dropped));
    put(&*s, drop_at("d2", 0));
    assert!(keys(&*s, "d2").is_empty());
    // Dropped data is not sealed.
    let refused = apply(&*s, Write::SealSnapshot(Box::new(record("d2", 1))));
    assert!(matches!(refused, Err(Refused::Changed(_))), "{refused:?}");
}
