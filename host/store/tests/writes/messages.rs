//! Messages after they are emitted: `Subscribe` and `Unsubscribe`, and each
//! `Delivery` op (sent, tried, ack, dead, resend, clear) on the deliveries
//! of one message to two subscriptions.

use weft_core::Timestamp;
use weft_store::DeliveryState::{self, Acked, Completed, Created, Delivered};
use weft_store::{DeliveryOp, DeliveryRecord, Refused, Store, Target, What, Write};

use crate::common::{T0, at, emission, emit, exists, not_found, queued, started, sub, subscribe};
use crate::table::{given, put, walk};

/// Run `r` emitted `m1` on `ch`, which `ch/a` and `ch/b` subscribe to: one
/// delivery each, both created.
pub(crate) fn emitted(s: &dyn Store) {
    started(s);
    put(s, subscribe("ch/a"));
    put(s, subscribe("ch/b"));
    put(s, emit(s, vec![emission("m1", "ch")]));
}

/// The delivery of `m1` to `subscription`.
fn delivery(s: &dyn Store, subscription: &str) -> DeliveryRecord {
    let mut all = s.deliveries(usize::MAX).unwrap().into_iter();
    all.find(|d| d.subscription == subscription).unwrap()
}

/// `ch/a`'s delivery at a glance: state, attempts, rows in its queue and in
/// its dead letters, and the deliveries of `m1` still pending.
fn da(s: &dyn Store) -> (DeliveryState, u32, usize, usize, u32) {
    let d = delivery(s, "ch/a");
    let (queue, dead) = (queued(s, "ch/a", false), queued(s, "ch/a", true));
    (d.state, d.attempts, queue.len(), dead.len(), pending(s))
}

/// `ch/a`'s delivery's times: delivered, due again, acked.
fn da_times(s: &dyn Store) -> [Option<Timestamp>; 3] {
    let d = delivery(s, "ch/a");
    [d.delivered_at, d.next_at, d.acked_at]
}

fn change(s: &dyn Store, subscription: &str, op: DeliveryOp) -> Write {
    Write::Delivery(delivery(s, subscription).id, op)
}

fn pending(s: &dyn Store) -> u32 {
    s.message(1).unwrap().unwrap().pending
}

fn sent(s: &dyn Store) -> Write {
    let (at, next_at) = (at(1), at(31));
    change(s, "ch/a", DeliveryOp::Sent { at, next_at })
}

fn tried(s: &dyn Store, error: Option<&str>) -> Write {
    let (at, error, next_at) = (at(2), error.map(str::to_owned), at(99));
    change(s, "ch/a", DeliveryOp::Tried { at, error, next_at })
}

fn ack(s: &dyn Store, subscription: &str, secs: u64) -> Write {
    change(s, subscription, DeliveryOp::Ack { at: at(secs) })
}

fn dead(s: &dyn Store, attempted: bool) -> Write {
    let op = DeliveryOp::Dead {
        at: at(5),
        error: "gone".to_owned(),
        attempted,
    };
    change(s, "ch/a", op)
}

fn in_state(e: &Refused, expected: DeliveryState) -> bool {
    matches!(e, Refused::DeliveryState { state, .. } if *state == expected)
}

#[test]
fn subscribe_and_unsubscribe() {
    walk(&[
        given("a subscription", |_| {})
            .write(|_| subscribe("ch/a"))
            .stored(|s| {
                assert_eq!(
                    s.subscription("ch/a").unwrap().unwrap(),
                    sub("ch/a", Target::Sse)
                );
                assert_eq!(s.subscriptions(Some("ch")).unwrap().len(), 1);
                assert!(s.subscriptions(Some("other")).unwrap().is_empty());
            }),
        given("the same subscription again: kept", |_| {})
            .then(|_| subscribe("ch/a"))
            .write(|_| {
                let mut again = sub("ch/a", Target::Sse);
                again.created_at = at(5);
                Write::Subscribe(Box::new(again))
            })
            .stored(|s| assert_eq!(s.subscription("ch/a").unwrap().unwrap().created_at, T0)),
        given("one with the same key, another target", |_| {})
            .then(|_| subscribe("ch/a"))
            .write(|_| {
                let (url, secret) = ("http://example.test/".to_owned(), "secret".to_owned());
                Write::Subscribe(Box::new(sub(
                    "ch/a",
                    Target::Webhook {
                        url,
                        secret,
                        sealed: None,
                    },
                )))
            })
            .refused(|e| exists(e, What::Subscription("ch/a".into()))),
        given("unsubscribe: the queue goes, settled", emitted)
            .write(|_| Write::Unsubscribe("ch/a".to_owned()))
            .stored(|s| {
                assert_eq!(s.subscription("ch/a").unwrap(), None);
                assert!(queued(s, "ch/a", false).is_empty());
                assert_eq!(s.deliveries(usize::MAX).unwrap(), [delivery(s, "ch/b")]);
                assert_eq!(pending(s), 1);
            }),
        given("unsubscribe: the dead letters go, settled", emitted)
            .then(|s| dead(s, true))
            .then(|s| ack(s, "ch/b", 3))
            .write(|_| Write::Unsubscribe("ch/a".to_owned()))
            .stored(|s| {
                // The last to settle completes the acked.
                assert!(s.dead_letters(usize::MAX).unwrap().is_empty());
                let b = delivery(s, "ch/b");
                assert_eq!((b.state, b.acked_at), (Completed, Some(at(3))));
                assert_eq!(
                    (s.deliveries(usize::MAX).unwrap(), pending(s)),
                    (vec![b], 0)
                );
            }),
        given("unsubscribe: an unknown subscription", emitted)
            .write(|_| Write::Unsubscribe("nope/x".to_owned()))
            .refused(|e| not_found(e, What::Subscription("nope/x".into()))),
    ]);
}

#[test]
fn delivery_sent_tried_and_acked() {
    walk(&[
        given("sent: one more attempt, due again", emitted)
            .write(sent)
            .stored(|s| {
                assert_eq!(da(s), (Delivered, 1, 1, 0, 2));
                assert_eq!(da_times(s), [Some(at(1)), Some(at(31)), None]);
            }),
        given("sent, once acked", emitted)
            .then(|s| ack(s, "ch/a", 1))
            .write(sent)
            .refused(|e| in_state(e, Acked)),
        given("tried without an error: acked", emitted)
            .then(sent)
            .write(|s| tried(s, None))
            .stored(|s| {
                assert_eq!(da(s), (Acked, 2, 0, 0, 1));
                assert_eq!(da_times(s), [Some(at(2)), None, Some(at(2))]);
            }),
        given("tried with an error: due again", emitted)
            .then(sent)
            .write(|s| tried(s, Some("500")))
            .stored(|s| {
                assert_eq!(da(s), (Delivered, 2, 1, 0, 2));
                assert_eq!(da_times(s), [Some(at(2)), Some(at(99)), None]);
                assert_eq!(delivery(s, "ch/a").last_error.unwrap(), "500");
            }),
        given("tried, once dead", emitted)
            .then(|s| dead(s, true))
            .write(|s| tried(s, None))
            .refused(|e| in_state(e, DeliveryState::Error)),
        given("an ack: dequeued and settled", emitted)
            .write(|s| ack(s, "ch/a", 2))
            .stored(|s| {
                assert_eq!(da(s), (Acked, 0, 0, 0, 1));
                assert_eq!(da_times(s), [None, None, Some(at(2))]);
            }),
        given("a late ack: nothing changes", emitted)
            .then(|s| ack(s, "ch/a", 1))
            .write(|s| ack(s, "ch/a", 2))
            .stored(|s| assert_eq!(da_times(s), [None, None, Some(at(1))])),
        given("an ack of a dead letter", emitted)
            .then(|s| dead(s, true))
            .write(|s| ack(s, "ch/a", 6))
            .stored(|s| assert_eq!(da(s), (Acked, 1, 0, 0, 1))),
        given("the last ack completes them all", emitted)
            .then(|s| ack(s, "ch/a", 1))
            .write(|s| ack(s, "ch/b", 2))
            .stored(|s| {
                assert_eq!(da(s), (Completed, 0, 0, 0, 0));
                assert_eq!(delivery(s, "ch/b").state, Completed);
            }),
        given("an unknown delivery", emitted)
            .write(|_| Write::Delivery("nope".to_owned(), DeliveryOp::Resend))
            .refused(|e| not_found(e, What::Delivery("nope".into()))),
    ]);
}

#[test]
fn delivery_dead_letters() {
    walk(&[
        given("dead after an attempt", emitted)
            .then(sent)
            .write(|s| dead(s, true))
            .stored(|s| {
                assert_eq!(da(s), (DeliveryState::Error, 2, 0, 1, 2));
                assert_eq!(da_times(s), [Some(at(1)), None, None]);
                assert_eq!(delivery(s, "ch/a").last_error.unwrap(), "gone");
                assert_eq!(s.dead_letters(usize::MAX).unwrap(), [delivery(s, "ch/a")]);
            }),
        given("dead without an attempt", emitted)
            .write(|s| dead(s, false))
            .stored(|s| {
                assert_eq!(da(s), (DeliveryState::Error, 0, 0, 1, 2));
                assert_eq!(da_times(s), [Some(at(5)), None, None]);
            }),
        given("dead, once acked", emitted)
            .then(|s| ack(s, "ch/a", 1))
            .write(|s| dead(s, true))
            .refused(|e| in_state(e, Acked)),
        given("resend: queued again, from 0", emitted)
            .then(sent)
            .then(|s| dead(s, true))
            .write(|s| change(s, "ch/a", DeliveryOp::Resend))
            .stored(|s| {
                assert_eq!(da(s), (Created, 0, 1, 0, 2));
                assert_eq!(queued(s, "ch/a", false)[0].seq, 1);
            }),
        given("resend, unless dead", emitted)
            .write(|s| change(s, "ch/a", DeliveryOp::Resend))
            .refused(|e| in_state(e, Created)),
        given("clear: the dead letter goes, settled", emitted)
            .then(|s| dead(s, true))
            .write(|s| change(s, "ch/a", DeliveryOp::Clear))
            .stored(|s| {
                assert_eq!(s.deliveries(usize::MAX).unwrap(), [delivery(s, "ch/b")]);
                assert!(s.dead_letters(usize::MAX).unwrap().is_empty());
                assert_eq!(pending(s), 1);
            }),
        given("clear, unless dead", emitted)
            .then(sent)
            .write(|s| change(s, "ch/a", DeliveryOp::Clear))
            .refused(|e| in_state(e, Delivered)),
    ]);
}

fn hold(key: &str, host: &str, epoch: u64) -> Write {
    let lease = weft_store::Lease {
        host: host.to_owned(),
        epoch,
    };
    Write::HoldQueue {
        subscription: key.to_owned(),
        lease,
    }
}

fn host_row(id: &str) -> Write {
    Write::renew(&weft_store::HostRecord {
        id: id.to_owned(),
        machine: "m".to_owned(),
        pid: 0,
        started_at: T0,
        expires_at: at(60),
    })
}

fn queue_holder(s: &dyn Store) -> Option<weft_store::Lease> {
    s.lease(&weft_store::queue_lease("ch/a")).unwrap()
}

#[test]
fn hold_queue() {
    walk(&[
        given("a free queue is taken at epoch 1", |s| {
            put(s, subscribe("ch/a"))
        })
        .write(|_| hold("ch/a", "h1", 1))
        .stored(|s| assert_eq!(queue_holder(s).unwrap().host, "h1")),
        given("a queue held by a live host", |s| put(s, subscribe("ch/a")))
            .then(|_| host_row("h1"))
            .then(|_| hold("ch/a", "h1", 1))
            .write(|_| hold("ch/a", "h2", 2))
            .refused(|e| matches!(e, Refused::Fenced { owner, .. } if owner == "h1")),
        given(
            "a queue whose host is gone is taken at the next epoch",
            |s| {
                put(s, subscribe("ch/a"));
            },
        )
        .then(|_| hold("ch/a", "h1", 1))
        .write(|_| hold("ch/a", "h2", 2))
        .stored(|s| {
            let holder = queue_holder(s).unwrap();
            assert_eq!((holder.host.as_str(), holder.epoch), ("h2", 2));
        }),
        given("a stale epoch", |s| put(s, subscribe("ch/a")))
            .then(|_| hold("ch/a", "h1", 1))
            .write(|_| hold("ch/a", "h2", 1))
            .refused(|e| matches!(e, Refused::Fenced { .. })),
        given("no such subscription", |_| {})
            .write(|_| hold("ch/a", "h1", 1))
            .refused(|e| not_found(e, What::Subscription("ch/a".into()))),
        given("unsubscribe lets the queue's lease go", |s| {
            put(s, subscribe("ch/a"))
        })
        .then(|_| hold("ch/a", "h1", 1))
        .write(|_| Write::Unsubscribe("ch/a".to_owned()))
        .stored(|s| assert_eq!(queue_holder(s), None)),
    ]);
}
