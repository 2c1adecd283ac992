//! Connections over TLS, with `sslmode` as libpq reads it, to the test
//! cluster, whose certificate its own CA signed (`scripts/postgres-dev`
//! makes both; `scripts/test` names the CA's file in
//! `WEFT_TEST_POSTGRES_CA`).

use weft_store::PostgresStore;

use crate::{unique, url};

fn ca() -> String {
    std::env::var("WEFT_TEST_POSTGRES_CA").expect(
        "WEFT_TEST_POSTGRES_CA names no CA file: run scripts/test, or start a server with scripts/postgres-dev and name its DIR/ca.crt",
    )
}

/// `url` with `query` added.
fn with(url: &str, query: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{query}")
}

/// How many of the server's connections named `name` are encrypted, and
/// how many are not, as the server says (`pg_stat_ssl`).
fn encrypted(name: &str) -> (i64, i64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name = $1",
                &[&name],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    })
}

#[test]
fn verify_full_against_the_clusters_ca_connects_over_tls() {
    let name = unique("tls_full");
    let query = format!(
        "application_name={name}&schema={name}&sslmode=verify-full&sslrootcert={}",
        ca()
    );
    let store = PostgresStore::open(&with(&url(), &query)).unwrap();
    // The pool keeps the connection that applied the migrations.
    let (tls, plain) = encrypted(&name);
    assert!(tls >= 1 && plain == 0, "{tls} over TLS, {plain} plain");
    store.discard().unwrap();
}

#[test]
fn sslmode_disable_connects_in_plain_text_and_prefer_takes_tls_when_offered() {
    for (mode, over_tls) in [("disable", false), ("prefer", true), ("require", true)] {
        let name = unique(&format!("tls_{mode}"));
        let query = format!("application_name={name}&schema={name}&sslmode={mode}");
        let store = PostgresStore::open(&with(&url(), &query)).unwrap();
        let (tls, plain) = encrypted(&name);
        if over_tls {
            assert!(
                tls >= 1 && plain == 0,
                "{mode}: {tls} over TLS, {plain} plain"
            );
        } else {
            assert!(
                plain >= 1 && tls == 0,
                "{mode}: {tls} over TLS, {plain} plain"
            );
        }
        store.discard().unwrap();
    }
}

#[test]
fn a_server_whose_ca_is_not_among_the_roots_is_refused_naming_the_handshake() {
    // A CA of its own, which signed nothing the server has
    // (`scripts/postgres-dev` makes it beside the cluster's).
    let other = std::path::Path::new(&ca()).with_file_name("other-ca.crt");
    let other = other.display();
    for query in [
        "sslmode=verify-full&sslrootcert=system".to_owned(),
        format!("sslmode=verify-full&sslrootcert={other}"),
        format!("sslmode=verify-ca&sslrootcert={other}"),
        format!("sslmode=require&sslrootcert={other}"),
    ] {
        let refused = PostgresStore::open(&with(&url(), &query))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("no TLS connection") && refused.contains("UnknownIssuer"),
            "{query}: {refused}"
        );
    }
    // The cluster's CA passes verify-ca as well.
    let name = unique("tls_ca");
    let query = format!("schema={name}&sslmode=verify-ca&sslrootcert={}", ca());
    let store = PostgresStore::open(&with(&url(), &query)).unwrap();
    store.discard().unwrap();
}

#[test]
fn bad_tls_settings_are_refused_before_connecting() {
    let said = PostgresStore::open(&with(&url(), "sslmode=verify"))
        .unwrap_err()
        .to_string();
    assert!(said.contains("sslmode `verify`"), "{said}");
    let said = PostgresStore::open(&with(
        &url(),
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ))
    .unwrap_err()
    .to_string();
    assert!(said.contains("sslrootcert `/nonexistent/ca.pem`"), "{said}");
    let said = PostgresStore::open(&with(&url(), "sslmode=verify-ca"))
        .unwrap_err()
        .to_string();
    assert!(said.contains("needs sslrootcert"), "{said}");
}
