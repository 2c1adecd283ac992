//! News between the stores of several hosts on one database: a commit
//! that parks a run or changes a tenant wakes the waits, for that kind,
//! of every store on the same schema (`LISTEN`/`NOTIFY`), and of none on
//! another schema.

use std::time::Duration;

use weft_core::Timestamp;
use weft_store::{AccessWrite, PostgresStore, Store, TenantRecord, Wake, Write};

use crate::common::{def, run};
use crate::{unique, url};

/// A store on `schema`, once it listens: its listener wakes every kind
/// as it starts.
fn listening(schema: &str) -> PostgresStore {
    let store = PostgresStore::open_in(&url(), Some(schema)).unwrap();
    let wakes = store.wakes().expect("PostgreSQL hears news");
    let seen = wakes.wait(&[Wake::Parked], 0, Duration::from_secs(10));
    assert!(seen >= 1, "the store did not start listening in 10 s");
    store
}

#[test]
fn a_commit_wakes_the_stores_of_its_schema_for_its_kind_only() {
    let name = unique("news_a");
    let (a, b) = (listening(&name), listening(&name));
    let elsewhere = listening(&unique("news_b"));
    let wakes = b.wakes().unwrap();
    let others = elsewhere.wakes().unwrap();
    let parked = wakes.seen(&[Wake::Parked]);
    let settings = wakes.seen(&[Wake::Settings]);
    let other_parked = others.seen(&[Wake::Parked]);

    let write = Write::create_run(&run("r1"), &def("d0", "id: wf"), Vec::new()).parked("t");
    a.apply_one(&write).unwrap();
    assert_ne!(
        wakes.wait(&[Wake::Parked], parked, Duration::from_secs(10)),
        parked,
        "no news of the parked run in 10 s"
    );
    assert_eq!(
        wakes.seen(&[Wake::Settings]),
        settings,
        "not news of settings"
    );
    let tenant = TenantRecord {
        name: "t".to_owned(),
        created_at: Timestamp(1),
        quota: weft_store::Quota::default(),
    };
    a.apply_one(&Write::Access(AccessWrite::PutTenant {
        name: "t".to_owned(),
        record: weft_store::encode(&tenant),
        new: true,
    }))
    .unwrap();
    assert_ne!(
        wakes.wait(&[Wake::Settings], settings, Duration::from_secs(10)),
        settings,
        "no news of the tenant in 10 s"
    );
    // Another schema's store heard neither.
    assert_eq!(
        others.wait(&[Wake::Parked], other_parked, Duration::from_millis(300)),
        other_parked
    );
    // A refused write sends nothing: its transaction wrote nothing.
    let settings = wakes.seen(&[Wake::Settings]);
    let again = a.apply_one(&Write::Access(AccessWrite::PutTenant {
        name: "t".to_owned(),
        record: weft_store::encode(&tenant),
        new: true,
    }));
    assert!(again.is_err());
    // Nor does the removal of a tenant that is not there.
    let gone = a.apply_one(&Write::Access(AccessWrite::RemoveTenant("nope".to_owned())));
    assert!(gone.is_err());
    assert_eq!(
        wakes.wait(&[Wake::Settings], settings, Duration::from_millis(300)),
        settings
    );
    for store in [a, b, elsewhere] {
        store.discard().unwrap();
    }
}
