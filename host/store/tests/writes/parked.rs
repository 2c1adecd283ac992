//! Free work: a run started as parked (`Write::parked`) has no lease and
//! is listed among the parked runs until a host takes it, by
//! `Store::claim_parked` or a `Claim`, or it is cancelled. Hosts that
//! claim at once take different runs.

use std::collections::HashSet;
use std::sync::Arc;

use weft_store::{Lease, Store, Write};

use crate::common::{R, cancel, create, def, run};
use crate::table::{open, put};

/// Run `id` of `tenant`, started as free work.
fn parked(id: &str, tenant: &str) -> Write {
    Write::create_run(&run(id), &def("d0", "id: wf"), Vec::new()).parked(tenant)
}

fn lease(host: &str, epoch: u64) -> Option<Lease> {
    Some(Lease {
        host: host.to_owned(),
        epoch,
    })
}

fn pairs(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(id, tenant)| ((*id).to_owned(), (*tenant).to_owned()))
        .collect()
}

#[test]
fn parked_runs_are_claimed_once_oldest_first_passing_over_tenants_asked() {
    let (_dir, s) = open();
    for (id, tenant) in [("r1", "a"), ("r2", "b"), ("r3", "a")] {
        put(&*s, parked(id, tenant));
    }
    // A run started under a lease is not free work.
    put(&*s, create(&run("r4")));
    assert_eq!(
        s.parked(10).unwrap(),
        pairs(&[("r1", "a"), ("r2", "b"), ("r3", "a")])
    );
    assert_eq!(s.parked(1).unwrap(), pairs(&[("r1", "a")]));
    assert_eq!(s.lease("r1").unwrap(), None);

    let taken = s.claim_parked("h1", 2, &[]).unwrap();
    assert_eq!(taken, pairs(&[("r1", "a"), ("r2", "b")]));
    assert_eq!(s.lease("r1").unwrap(), lease("h1", 1));
    assert_eq!(s.lease("r2").unwrap(), lease("h1", 1));
    assert_eq!(s.parked(10).unwrap(), pairs(&[("r3", "a")]));

    // Tenant `a` has no room: passed over; then taken.
    assert_eq!(s.claim_parked("h2", 5, &[("a".to_owned(), 0)]).unwrap(), []);
    assert_eq!(s.lease("r3").unwrap(), None);
    assert_eq!(s.claim_parked("h2", 5, &[]).unwrap(), pairs(&[("r3", "a")]));
    assert_eq!(s.lease("r3").unwrap(), lease("h2", 1));
    assert_eq!(s.parked(10).unwrap(), []);
    assert_eq!(s.claim_parked("h3", 5, &[]).unwrap(), []);
}

#[test]
fn a_claim_takes_no_more_of_a_tenant_than_its_room() {
    let (_dir, s) = open();
    for (id, tenant) in [
        ("r1", "a"),
        ("r2", "a"),
        ("r3", "a"),
        ("r4", "b"),
        ("r5", "c"),
    ] {
        put(&*s, parked(id, tenant));
    }
    let rooms = [("a".to_owned(), 1), ("c".to_owned(), 0)];
    assert_eq!(
        s.claim_parked("h1", 5, &rooms).unwrap(),
        pairs(&[("r1", "a"), ("r4", "b")])
    );
    assert_eq!(
        s.parked(10).unwrap(),
        pairs(&[("r2", "a"), ("r3", "a"), ("r5", "c")])
    );
    // The oldest `n` of what the rooms allow.
    let rooms = [("a".to_owned(), 5)];
    assert_eq!(
        s.claim_parked("h2", 2, &rooms).unwrap(),
        pairs(&[("r2", "a"), ("r3", "a")])
    );
}

#[test]
fn a_parked_run_leaves_the_parked_runs_when_claimed_or_cancelled() {
    let (_dir, s) = open();
    put(&*s, parked("r1", "a"));
    put(
        &*s,
        Write::Claim {
            run: "r1".to_owned(),
            lease: lease("h1", 1).unwrap(),
        },
    );
    assert_eq!(s.parked(10).unwrap(), []);
    assert_eq!(s.lease("r1").unwrap(), lease("h1", 1));

    put(&*s, parked(R, "a"));
    put(&*s, cancel(&*s, 5));
    assert_eq!(s.parked(10).unwrap(), []);
    assert_eq!(s.claim_parked("h1", 5, &[]).unwrap(), []);
    assert_eq!(s.lease(R).unwrap(), None);
}

#[test]
fn hosts_claiming_at_once_take_each_run_once() {
    let (_dir, s) = open();
    let ids: Vec<String> = (0..40).map(|n| format!("r{n:02}")).collect();
    for id in &ids {
        put(&*s, parked(id, "a"));
    }
    let claimers: Vec<_> = (0..4)
        .map(|n| {
            let s: Arc<dyn Store> = Arc::clone(&s);
            std::thread::spawn(move || {
                let host = format!("h{n}");
                let mut taken = Vec::new();
                loop {
                    let got = s.claim_parked(&host, 3, &[]).unwrap();
                    if got.is_empty() {
                        return (host, taken);
                    }
                    taken.extend(got.into_iter().map(|(id, _)| id));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for claimer in claimers {
        let (host, taken) = claimer.join().unwrap();
        for id in taken {
            assert_eq!(s.lease(&id).unwrap(), lease(&host, 1), "run {id}");
            assert!(seen.insert(id.clone()), "run {id} was taken twice");
        }
    }
    assert_eq!(seen.len(), ids.len(), "every run was taken");
    assert_eq!(s.parked(100).unwrap(), []);
}
