//! The web UI in a real headless Chromium, driven through WebDriver
//! (`chromedriver`, with `fantoccini`): the runs page, a run waiting on an
//! `await` step answered from its form and seen to finish without a
//! reload, and a dead letter resent. Each page is photographed into
//! `target/ui-screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (Debian's `chromium` and
//! `chromium-driver`, which `.ci/run` installs); `WEFT_CHROMEDRIVER` and
//! `WEFT_CHROMIUM` name others.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::common::receiver::Receiver;
use crate::common::server::{Host, run_ended, serve, start_run};
use crate::common::{Scratch, root};

const APPROVAL: &str = "id: approval\nsteps:\n  - { id: first, uses: echo, with: 1 }\n  - id: both\n    parallel:\n      - { id: left, uses: echo, with: 2 }\n      - { id: right, sleep: 10ms }\n  - { id: approve, await: {} }\n  - { id: after, uses: echo, with: \"${{ steps.approve.output }}\" }\n";

const NEWS: &str = "id: news\nsteps:\n  - { id: tell, emit: news, with: { hello: world } }\n";

/// A chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let program = std::env::var("WEFT_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned());
    let child = Command::new(&program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {program} ({e}); install chromium and chromium-driver, as .ci/run does")
        });
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver { child, url }
}

async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let binary = std::env::var("WEFT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": binary,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

fn screenshots() -> PathBuf {
    let dir = root().join("target").join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn photograph(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    std::fs::write(screenshots().join(format!("{name}.png")), png).unwrap();
}

/// Waits (up to 30 s) until `css` matches an element whose text passes
/// `check`: its text.
async fn text_of(client: &Client, css: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
        {
            if check(&text) {
                return text;
            }
            last = text;
        }
        assert!(
            Instant::now() < deadline,
            "`{css}` never passed; last seen: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_for(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("`{css}` never showed: {e}"))
}

/// Clicks `css`, finding it again if the page drew it anew meanwhile (a
/// live update redraws tables and forms).
async fn click(client: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match wait_for(client, css).await.click().await {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < deadline, "cannot click `{css}`: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Types `text` into the field `css` (in place of what it held), again if
/// the page drew the field anew.
async fn type_into(client: &Client, css: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let field = wait_for(client, css).await;
        let typed = async {
            field.clear().await?;
            field.send_keys(text).await?;
            field.prop("value").await
        }
        .await;
        match typed {
            Ok(Some(value)) if value == text => return,
            other => assert!(
                Instant::now() < deadline,
                "cannot type into `{css}`: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn dead_letters(host: &Host) -> Vec<Value> {
    let (_, dead) = host.call("GET", "/v1/deliveries?state=error", None);
    dead["deliveries"].as_array().cloned().unwrap_or_default()
}

#[test]
fn the_ui_answers_a_waiting_run_and_resends_a_dead_letter_in_a_real_browser() {
    let scratch = Scratch::new(&["echo"]);
    let workflows = scratch.path().join("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    std::fs::write(workflows.join("approval.yaml"), APPROVAL).unwrap();
    std::fs::write(workflows.join("news.yaml"), NEWS).unwrap();
    let host = serve(&scratch, 0);

    // A dead letter: a webhook that fails its one attempt, until it is
    // healed.
    let healthy = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&healthy);
    let receiver = Receiver::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            200
        } else {
            503
        }
    });
    let spec = json!({
        "channel": "news", "name": "hook", "max_attempts": 1,
        "webhook": { "url": receiver.url, "secret": "s3cret" },
    });
    let (status, made) = host.call("POST", "/v1/subscriptions", Some(&spec.to_string()));
    assert_eq!(status, 201, "{made}");
    let news = start_run(&host, "news", &json!({}));
    assert_eq!(run_ended(&host, &news)["run"]["state"], "succeeded");
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        if let Some(dead) = dead_letters(&host).first() {
            break dead["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no dead letter");
        std::thread::sleep(Duration::from_millis(20));
    };

    let run = start_run(&host, "approval", &json!({ "order": 17 }));
    let driver = driver();
    let profile = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = browser(&driver, profile.path()).await;

        // The runs page lists the run; its link opens it.
        client.goto(&format!("{}/#/runs", host.url)).await.unwrap();
        let row = format!("tr[data-run=\"{run}\"]");
        wait_for(&client, &row).await;
        photograph(&client, "runs").await;
        // Once the page is live, nothing it shows is missed.
        text_of(&client, "#live", |s| s == "live").await;
        click(&client, &format!("{row} a.run-link")).await;
        text_of(&client, "#run-state", |s| s == "running").await;
        let form = "form.await-form[data-path=\"approve\"]";
        wait_for(&client, form).await;
        wait_for(&client, "#graph .node[data-step=\"left\"]").await;
        wait_for(&client, "#timeline li.record").await;
        photograph(&client, "run-waiting").await;

        // Answered from the form: the page sees the run finish without
        // loading again (a mark left on the window survives).
        client
            .execute("window.__weftMark = 'same page'; return null;", vec![])
            .await
            .unwrap();
        text_of(&client, "#live", |s| s == "live").await;
        let answer = r#"{"approved": true}"#;
        type_into(&client, &format!("{form} textarea[name=output]"), answer).await;
        click(&client, &format!("{form} button.await-complete")).await;
        text_of(&client, "#run-state", |s| s == "succeeded").await;
        let mark = client
            .execute("return window.__weftMark || null;", vec![])
            .await
            .unwrap();
        assert_eq!(mark, json!("same page"), "the page was loaded again");
        // The timeline and the graph catch up with the end.
        text_of(&client, "#timeline", |s| s.contains("after")).await;
        client
            .execute("window.scrollTo(0, 0); return null;", vec![])
            .await
            .unwrap();
        photograph(&client, "run").await;
        let (_, shown) = host.call("GET", &format!("/v1/runs/{run}"), None);
        let steps = shown["steps"].as_array().unwrap();
        let after = steps.iter().find(|s| s["path"] == "after").unwrap();
        assert_eq!(after["output"], json!({ "approved": true }), "{shown}");

        // The dead letter, resent from the deliveries page once the
        // webhook is healed, is delivered.
        healthy.store(true, Ordering::SeqCst);
        client
            .goto(&format!("{}/#/deliveries?dead", host.url))
            .await
            .unwrap();
        let row = format!("tr[data-delivery=\"{dead}\"]");
        wait_for(&client, &row).await;
        photograph(&client, "dead-letters").await;
        click(&client, &format!("{row} button.resend")).await;
        text_of(&client, "#notice", |s| s.contains("resent")).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while receiver.got().len() < 2 {
            assert!(Instant::now() < deadline, "the resent delivery never came");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, delivery) = host.call("GET", &format!("/v1/deliveries/{dead}"), None);
        assert_ne!(delivery["delivery"]["state"], "error", "{delivery}");

        // Every other page opens, and is photographed.
        for (route, css, name) in [
            ("#/awaits", "table#awaits", "awaits"),
            ("#/schedules", "table#schedules", "schedules"),
            ("#/plugins", "table#plugins", "plugins"),
            ("#/workflows", "table#workflows", "workflows"),
            ("#/workflows/approval", "pre#source", "workflow"),
        ] {
            client.goto(&format!("{}/{route}", host.url)).await.unwrap();
            wait_for(&client, css).await;
            photograph(&client, name).await;
        }
        client.close().await.unwrap();
    });
}
