//! `ResealSecret`: a secret sealed again after a key rotation is stored
//! only over the value it was read with, keeping its grants; one deleted
//! or set again since is left as it is.

use weft_store::{AccessWrite, Refused, SecretGrant, SecretRecord, Store, What, Write};

use crate::common::T0;
use crate::table::{open, put};

fn secret(sealed: &[u8], grants: Vec<SecretGrant>) -> SecretRecord {
    SecretRecord {
        name: "token".to_owned(),
        sealed: sealed.to_vec(),
        updated_at: T0,
        grants,
    }
}

fn set(sealed: &[u8]) -> Write {
    Write::Access(AccessWrite::PutSecret {
        tenant: "acme".to_owned(),
        name: "token".to_owned(),
        record: weft_store::encode(&secret(sealed, Vec::new())),
    })
}

fn reseal(read: &[u8], again: &[u8]) -> Write {
    Write::Access(AccessWrite::ResealSecret {
        tenant: "acme".to_owned(),
        name: "token".to_owned(),
        sealed: read.to_vec(),
        record: weft_store::encode(&secret(again, Vec::new())),
    })
}

fn stored(s: &dyn Store) -> Vec<SecretRecord> {
    s.secrets("acme").unwrap()
}

#[test]
fn a_reseal_lands_only_over_the_value_it_read() {
    let (_dir, handle) = open();
    let s = handle.as_ref();
    put(s, set(b"old"));
    let grant = SecretGrant {
        plugin: "p".to_owned(),
        digest: "sha256:00".to_owned(),
    };
    put(
        s,
        Write::Access(AccessWrite::GrantSecret {
            tenant: "acme".to_owned(),
            name: "token".to_owned(),
            grant: grant.clone(),
            revoke: false,
        }),
    );
    // Set again since it was read: the new value stays.
    put(s, set(b"new"));
    let answers = s.apply(&[&reseal(b"old", b"old, sealed again")]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::Changed(What::Secret(name))) if name == "token"),
        "{answers:?}"
    );
    assert_eq!(stored(s)[0].sealed, b"new");
    // Over the value it read: sealed again, its grants kept.
    put(s, reseal(b"new", b"new, sealed again"));
    assert_eq!(stored(s), [secret(b"new, sealed again", vec![grant])]);
    // Deleted since it was read: not brought back.
    put(
        s,
        Write::Access(AccessWrite::DeleteSecret {
            tenant: "acme".to_owned(),
            name: "token".to_owned(),
        }),
    );
    let answers = s.apply(&[&reseal(b"new, sealed again", b"x")]).unwrap();
    assert!(
        matches!(&answers[0], Err(Refused::NotFound(What::Secret(_)))),
        "{answers:?}"
    );
    assert!(stored(s).is_empty());
}
