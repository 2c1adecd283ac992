//! Stored bytes by tenant: each charged write counts its bytes to its
//! tenant, a refusable one over the tenant's `max_stored_bytes` is refused
//! with nothing stored, and key-value values overwritten or deleted give
//! their bytes back.

use std::collections::BTreeMap;

use weft_core::KvEffects;
use weft_store::{AccessWrite, Quota, Refused, Store, TenantRecord, Write};

use crate::common::{R, SPACE, T0, commit_with, create, keyed, run, timer, with_deadline};
use crate::table::{open, put};

const TENANT: &str = "acme";

/// Tenant `acme` with a quota of `limit` stored bytes.
fn tenant(s: &dyn Store, limit: Option<u64>, new: bool) {
    let quota = Quota {
        max_stored_bytes: limit,
        ..Quota::default()
    };
    tenant_with(s, quota, new);
}

/// Tenant `acme` with `quota`.
fn tenant_with(s: &dyn Store, quota: Quota, new: bool) {
    let record = TenantRecord {
        name: TENANT.to_owned(),
        created_at: T0,
        quota,
    };
    put(s, Write::Access(AccessWrite::put_tenant(&record, new)));
}

fn charge(write: &Write) -> u64 {
    write.charge().map_or(0, |c| c.bytes)
}

fn kv(writes: &[(&str, Option<&str>)]) -> Option<KvEffects> {
    Some(KvEffects {
        space: SPACE.to_owned(),
        writes: writes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect(),
        reads: BTreeMap::new(),
        expires: BTreeMap::new(),
    })
}

#[test]
fn charged_writes_count_to_their_tenant_until_its_quota() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    let first = create(&run(R)).charged(TENANT, true);
    let bytes = charge(&first);
    assert!(bytes > 0);
    // Room for the first run, not for a second one.
    tenant(s, Some(bytes + bytes / 2), true);
    put(s, first);
    assert_eq!(s.stored_bytes(TENANT).unwrap(), bytes);
    assert_eq!(s.stored_bytes("other").unwrap(), 0);

    let second = create(&run("r2")).charged(TENANT, true);
    let answers = s.apply(&[&second, &create(&run("r3"))]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::StorageQuota { tenant, used, .. }) if tenant == TENANT && *used == bytes),
        "{answers:?}"
    );
    // Refused alone: nothing of it stored, nothing counted; the
    // uncharged write beside it landed.
    assert!(answers[1].is_ok());
    assert!(s.run("r2").unwrap().is_none());
    assert_eq!(s.stored_bytes(TENANT).unwrap(), bytes);

    // A write that may not be refused is stored and counted all the same.
    let forced = create(&run("r4")).charged(TENANT, false);
    let more = charge(&forced);
    put(s, forced);
    assert_eq!(s.stored_bytes(TENANT).unwrap(), bytes + more);

    // A raised quota holds at once, in the same transaction as its change.
    let record = TenantRecord {
        name: TENANT.to_owned(),
        created_at: T0,
        quota: Quota::default(),
    };
    let lift = Write::Access(AccessWrite::put_tenant(&record, false));
    let again = create(&run("r2")).charged(TENANT, true);
    let last = charge(&again);
    let answers = s.apply(&[&lift, &again]).unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(s.stored_bytes(TENANT).unwrap(), bytes + more + last);
}

#[test]
fn overwritten_and_deleted_values_give_their_bytes_back() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    tenant(s, None, true);
    put(s, create(&run(R)).charged(TENANT, true));
    let base = s.stored_bytes(TENANT).unwrap();

    let set = commit_with(s, R, "set", |_, _, x| {
        x.kv = kv(&[("a", Some("0123456789"))]);
    })
    .charged(TENANT, true);
    let set_bytes = charge(&set);
    put(s, set);
    assert_eq!(s.stored_bytes(TENANT).unwrap(), base + set_bytes);

    // The record's bytes stay; "a" and its 10 bytes go.
    let delete =
        commit_with(s, R, "delete", |_, _, x| x.kv = kv(&[("a", None)])).charged(TENANT, true);
    let delete_bytes = charge(&delete);
    put(s, delete);
    assert_eq!(
        s.stored_bytes(TENANT).unwrap(),
        base + set_bytes + delete_bytes - ("a".len() as u64 + 10)
    );
}

#[test]
fn a_step_result_over_the_quota_is_refused_with_its_effects() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    let start = create(&run(R)).charged(TENANT, true);
    tenant(s, Some(charge(&start) + 10), true);
    put(s, start);
    let result = commit_with(s, R, "big", |_, _, x| {
        x.kv = kv(&[("a", Some("a value larger than what is left"))]);
    })
    .charged(TENANT, true);
    let answers = s.apply(&[&result]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::StorageQuota { .. })),
        "{answers:?}"
    );
    assert!(s.steps(R).unwrap().is_empty());
    assert_eq!(s.kv_get(SPACE, "a").unwrap().version, 0);
}

/// A tenant at its quota can still make room: a write that gives back at
/// least what it adds is not refused. And the write's own refusals come
/// first: a start again with a key that started a run answers that run,
/// not the quota.
#[test]
fn a_tenant_over_its_quota_can_make_room_and_still_hears_of_duplicates() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    tenant(s, None, true);
    put(s, keyed(create(&run(R)), "k1").charged(TENANT, true));
    let value = "v".repeat(2_000);
    put(
        s,
        commit_with(s, R, "set", |_, _, x| x.kv = kv(&[("a", Some(&value))])).charged(TENANT, true),
    );
    // The quota drops below what is stored.
    let used = s.stored_bytes(TENANT).unwrap();
    let record = TenantRecord {
        name: TENANT.to_owned(),
        created_at: T0,
        quota: Quota {
            max_stored_bytes: Some(used / 2),
            ..Quota::default()
        },
    };
    put(s, Write::Access(AccessWrite::put_tenant(&record, false)));
    let again = keyed(create(&run("r2")), "k1").charged(TENANT, true);
    let answers = s.apply(&[&again]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::Duplicate { run, .. }) if run == R),
        "{answers:?}"
    );
    // Adding is refused; deleting the value, with a small record, is not.
    let grow =
        commit_with(s, R, "grow", |_, _, x| x.kv = kv(&[("b", Some("x"))])).charged(TENANT, true);
    let answers = s.apply(&[&grow]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::StorageQuota { .. })),
        "{answers:?}"
    );
    let shrink =
        commit_with(s, R, "shrink", |_, _, x| x.kv = kv(&[("a", None)])).charged(TENANT, true);
    put(s, shrink);
    assert!(s.stored_bytes(TENANT).unwrap() < used - 1_000);
}

/// Pending timers by tenant: every timer a tenant's runs set is counted
/// (a deadline, a sleep, a retry delay) and every one removed is taken
/// off; a `sleep` (or `await`) past the tenant's `max_timers` is refused
/// with nothing of its write stored, and a deadline or a retry delay
/// never is.
#[test]
fn a_tenants_pending_timers_are_counted_and_held_to_its_quota() {
    use weft_store::TimerKind::{Retry, Sleep};
    use weft_store::TimerRef;

    let (_dir, handle) = open();
    let s = handle.as_ref();
    let quota = Quota {
        max_timers: Some(2),
        ..Quota::default()
    };
    tenant_with(s, quota, true);
    let of_acme = |id: &str, deadline: bool| {
        let mut run = if deadline { with_deadline(id) } else { run(id) };
        run.workflow = "acme:wf".to_owned();
        run
    };
    let sets = |id: &str, kind, timer_id| {
        commit_with(s, id, "nap", move |step, run, _| {
            let timer = TimerRef {
                id: timer_id,
                ..timer(kind)
            };
            (step.output, step.timer) = (None, Some(timer));
            run.suspended = true;
        })
    };
    put(s, create(&of_acme(R, true)));
    assert_eq!(s.pending_timers(TENANT).unwrap(), 1);
    put(s, sets(R, Sleep, 7));
    assert_eq!(s.pending_timers(TENANT).unwrap(), 2);
    assert_eq!(s.pending_timers("other").unwrap(), 0);

    // At the quota: another run's sleep is refused, and nothing of its
    // write is stored.
    put(s, create(&of_acme("r2", false)));
    let answers = s.apply(&[&sets("r2", Sleep, 8)]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::TimerQuota { tenant, timers: 2, limit: 2 }) if tenant == TENANT),
        "{answers:?}"
    );
    assert_eq!(s.run("r2").unwrap().unwrap().step_records, 0);
    assert_eq!(s.pending_timers(TENANT).unwrap(), 2);
    // A retry delay is counted, never refused.
    put(s, sets("r2", Retry, 9));
    assert_eq!(s.pending_timers(TENANT).unwrap(), 3);

    // A run that ends takes its timers off the count.
    let mut ended = s.run(R).unwrap().unwrap();
    (ended.state, ended.suspended) = (weft_store::RunState::Succeeded, false);
    put(s, Write::update_run(&ended));
    assert_eq!(s.pending_timers(TENANT).unwrap(), 1);
    put(s, sets("r2", Sleep, 10));
    assert_eq!(s.pending_timers(TENANT).unwrap(), 2);
}

/// Audit rows by tenant: a tenant keeps its newest `max_audit_rows`, its
/// oldest deleted as new ones come; another tenant's are left alone.
#[test]
fn a_tenant_keeps_its_newest_audit_rows_up_to_its_quota() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    let quota = Quota {
        max_audit_rows: Some(3),
        ..Quota::default()
    };
    tenant_with(s, quota, true);
    let audit = |tenant: &str, n: u64| {
        let record = weft_store::AuditRecord {
            at: T0,
            tenant: tenant.to_owned(),
            actor: "test".to_owned(),
            action: "secret.set".to_owned(),
            object: format!("s{n}"),
            detail: serde_json::Value::Null,
        };
        // Keys are `(microseconds, random)`: the tenant's own random part.
        let random = if tenant == TENANT { n } else { 1_000 + n };
        Write::Access(AccessWrite::Audit {
            key: (T0.0 * 1000 + n, random),
            record: weft_store::encode(&record),
        })
    };
    for n in 0..5 {
        put(s, audit(TENANT, n));
        put(s, audit("other", n));
    }
    let objects = |tenant: &str| -> Vec<String> {
        s.audit(Some(tenant), 100)
            .unwrap()
            .into_iter()
            .map(|r| r.object)
            .collect()
    };
    assert_eq!(objects(TENANT), ["s4", "s3", "s2"]);
    assert_eq!(objects("other"), ["s4", "s3", "s2", "s1", "s0"]);
    assert_eq!(s.audit_rows(TENANT).unwrap(), 3);
    // Several in one transaction: still its newest three.
    s.apply(&[&audit(TENANT, 5), &audit(TENANT, 6)]).unwrap();
    assert_eq!(objects(TENANT), ["s6", "s5", "s4"]);
}
