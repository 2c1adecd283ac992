//! A real `weft serve` on a free loopback port, and calls to it.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Scratch, poll};

/// A `weft serve` serving the scratch's `workflows/` folder; killed when
/// dropped.
pub struct Host {
    pub child: Child,
    pub url: String,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    /// Kills the server with SIGKILL and waits for it to go.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// `method path [body]` (a JSON body): the status and the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        retried(|| {
            let agent = agent();
            match (method, body) {
                ("POST", Some(body)) => agent
                    .post(&url)
                    .header("content-type", "application/json")
                    .send(body),
                ("POST", None) => agent.post(&url).send_empty(),
                ("DELETE", _) => agent.delete(&url).call(),
                ("PUT", Some(body)) => agent
                    .put(&url)
                    .header("content-type", "application/json")
                    .send(body),
                ("PUT", None) => agent.put(&url).send_empty(),
                _ => agent.get(&url).call(),
            }
        })
    }

    /// POSTs `bytes` as `content_type`: the status and the JSON answer.
    pub fn send(&self, path: &str, content_type: &str, bytes: &[u8]) -> (u16, Value) {
        retried(|| {
            agent()
                .post(format!("{}{path}", self.url))
                .header("content-type", content_type)
                .send(bytes)
        })
    }
}

/// Sends a request and reads its answer. A server that refuses a body over
/// its limit answers 413 and closes the connection, and the client may
/// still be writing the body then: its write fails with a broken pipe or a
/// reset before it reads the answer. That race is the transport's, not the
/// answer's, so such a request is sent again (at most five times).
fn retried(
    mut send: impl FnMut() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> (u16, Value) {
    let mut tries = 0;
    loop {
        tries += 1;
        match send() {
            Err(ureq::Error::Io(e))
                if tries < 5
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) => {}
            response => return answer(response),
        }
    }
}

fn answer(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// An HTTP client that returns error statuses as answers.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Where `weft serve` writes its address, with a newline, once it listens
/// (after recovery and its start line).
pub fn address_file(scratch: &Scratch) -> PathBuf {
    scratch.data_dir().join("serve.addr")
}

/// Waits up to a minute for the `weft serve` of `scratch` to write its
/// address: the address, or `None` if it did not.
pub fn wait_for_address(scratch: &Scratch) -> Option<String> {
    let file = address_file(scratch);
    let written = || match std::fs::read_to_string(&file) {
        Ok(text) if text.ends_with('\n') => Ok(text.trim().to_owned()),
        _ => Err(()),
    };
    poll(Duration::from_secs(60), Duration::from_millis(20), written).ok()
}

/// Starts `weft serve` for `scratch`, logging to `serve-<n>.log`, and waits
/// until it listens.
pub fn serve(scratch: &Scratch, n: usize) -> Host {
    serve_with(scratch, n, &[])
}

/// [`serve`], with more arguments for `weft serve`.
#[allow(clippy::zombie_processes)] // `Host` waits for it when dropped
pub fn serve_with(scratch: &Scratch, n: usize, more: &[&str]) -> Host {
    let _ = std::fs::remove_file(address_file(scratch));
    std::fs::create_dir_all(scratch.path().join("workflows")).unwrap();
    let child = scratch
        .weft()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(more)
        .arg("--workflows")
        .arg(scratch.path().join("workflows"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(scratch.path().join(format!("serve-{n}.log"))).unwrap())
        .spawn()
        .unwrap();
    let url = wait_for_address(scratch).expect("weft serve did not start");
    Host { child, url }
}

/// Starts a run of `workflow` with `input` on `host`: its id.
pub fn start_run(host: &Host, workflow: &str, input: &Value) -> String {
    let (status, body) = host.call(
        "POST",
        "/v1/runs",
        Some(&serde_json::json!({ "workflow": workflow, "input": input }).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Waits (up to two minutes) for run `id` on `host` to end: `{run, steps}`.
pub fn run_ended(host: &Host, id: &str) -> Value {
    super::wait(
        Duration::from_secs(120),
        Duration::from_millis(20),
        || {
            let (status, body) = host.call("GET", &format!("/v1/runs/{id}"), None);
            if status == 200 && body["run"]["state"] != "running" {
                Ok(body)
            } else {
                Err(body)
            }
        },
        |seen| format!("run {id} never ended: {seen:#}"),
    )
}
