//! Shared by the end-to-end tests: builds the guests from source once per
//! test process, and runs the real `weft` binary in a scratch directory.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cutter;
pub mod receiver;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("host/cli/ has a grandparent")
        .to_owned()
}

/// The seed of a test's random choices: `WEFT_TEST_SEED` when set (to
/// replay a failure), else the clock's nanoseconds. Print it.
pub fn test_seed() -> u64 {
    match std::env::var("WEFT_TEST_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("WEFT_TEST_SEED={text} is not a number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64),
    }
}

/// Looks every `every` until `look` answers `Ok`, for up to `timeout`
/// (in real time: another thread or process is at work): what it found,
/// or, once time has run out, what it saw last.
pub fn poll<T, E>(
    timeout: Duration,
    every: Duration,
    mut look: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match look() {
            Ok(found) => return Ok(found),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// [`poll`], failing the test with `why` of what `look` saw last if time
/// runs out.
pub fn wait<T, E>(
    timeout: Duration,
    every: Duration,
    look: impl FnMut() -> Result<T, E>,
    why: impl FnOnce(E) -> String,
) -> T {
    poll(timeout, every, look).unwrap_or_else(|seen| panic!("{}", why(seen)))
}

/// The crates under host/, which are not built for wasm.
const HOST_CRATES: [&str; 8] = [
    "weft-core",
    "weft-model",
    "weft-runtime",
    "weft-store",
    "weft-engine",
    "weft",
    "weft-cli",
    "weft-sim",
];

/// The folder holding every guest component (plugins/* and tests/guests/*),
/// built from source with a nested cargo on first use.
///
/// The nested cargo gets its own target directory (the outer one is locked
/// by the cargo running these tests) and none of the outer build's flags.
pub fn guests() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = root();
        let target = root.join("target").join("guests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let output = Command::new(cargo)
            .current_dir(&root)
            .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
            .arg("--workspace")
            // Every crate of the host; what is left is the guests.
            .args(HOST_CRATES.iter().flat_map(|name| ["--exclude", name]))
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "building the guests failed (is the wasm32-wasip2 target installed? \
             `rustup target add wasm32-wasip2`):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        target.join("wasm32-wasip2").join("guest")
    })
}

/// `jq.wasm`: jaq, a jq clone, built unchanged from crates.io and added as
/// the command step `jq` by `scripts/build-jaq` (as `scripts/build-plugins`
/// does), once per machine.
pub fn jq_plugin() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let root = root();
        let out = root.join("target").join("toolchains").join("jq-plugin");
        let output = Command::new(root.join("scripts").join("build-jaq"))
            .arg(env!("CARGO_BIN_EXE_weft"))
            .arg(&out)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("scripts/build-jaq runs");
        assert!(
            output.status.success(),
            "scripts/build-jaq failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        out.join("jq.wasm")
    })
}

/// The bytes of guest `name` (the file stem cargo gives it).
pub fn guest_bytes(name: &str) -> Vec<u8> {
    let path = guests().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A scratch directory with a data dir, a plugins dir and workflow files.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A scratch directory whose plugins dir holds `plugins` (file stems).
    pub fn new(plugins: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let scratch = Self { dir };
        for name in plugins {
            scratch.add_plugin(name);
        }
        scratch
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn plugins_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// Adds guest `name`; one of plugins/ with a plugin.json (an HTTP
    /// handler or a command) with it recorded, as `weft plugin build`
    /// makes it.
    pub fn add_plugin(&self, name: &str) {
        std::fs::create_dir_all(self.plugins_dir()).unwrap();
        let mut bytes = guest_bytes(name);
        let manifest = root().join("plugins").join(name).join("plugin.json");
        if let Ok(text) = std::fs::read_to_string(&manifest) {
            let description = serde_json::from_str(&text).unwrap();
            bytes = weft::runtime::describe_command(&bytes, &description).unwrap();
        }
        std::fs::write(self.plugins_dir().join(format!("{name}.wasm")), bytes).unwrap();
    }

    /// Adds guest `guest`, a command or an HTTP handler (which does not
    /// describe itself), to the plugins dir as plugin `name` 0.1.0 through
    /// `weft plugin add --name --version --out`; returns what `weft plugin
    /// inspect` then says of it.
    pub fn add_described(&self, guest: &str, name: &str) -> String {
        let raw = self.path().join(format!("{guest}.raw.wasm"));
        std::fs::write(&raw, guest_bytes(guest)).unwrap();
        let file = self.plugins_dir().join(format!("{name}.wasm"));
        let added = self
            .weft()
            .args(["plugin", "add"])
            .arg(&raw)
            .args(["--name", name, "--version", "0.1.0", "--out"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            added.status.success(),
            "{}",
            String::from_utf8_lossy(&added.stderr)
        );
        let inspect = self
            .weft()
            .args(["plugin", "inspect"])
            .arg(&file)
            .output()
            .unwrap();
        String::from_utf8_lossy(&inspect.stdout).into_owned()
    }

    /// Writes `text` to `name` in the scratch directory.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A `weft` command with this scratch's data dir and plugins dir.
    pub fn weft(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
        command
            .env("WEFT_DATA_DIR", self.data_dir())
            .env("WEFT_PLUGINS", self.plugins_dir())
            .env_remove("WEFT_LOG");
        command
    }

    /// Polls `weft runs list` (for up to a minute) until the newest run of
    /// `workflow` passes `ready`, and returns it; another process is
    /// driving it.
    pub fn wait_for_newest_run(
        &self,
        workflow: &str,
        what: &str,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the newest run of `{workflow}` never {what}"
            );
            let listed = self.run(&["runs", "list", "--json", "--workflow", workflow]);
            if listed.code == Some(0)
                && let Some(run) = listed.json().as_array().and_then(|r| r.first().cloned())
                && ready(&run)
            {
                return run;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Runs `weft` with `args` and returns what it printed.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.weft().args(args).output().expect("weft runs"))
    }
}

/// What one `weft` process did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Parses stdout as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// The run id from the `run <id> of <workflow> started` line.
    pub fn run_id(&self) -> String {
        self.stderr
            .lines()
            .find_map(|line| line.strip_prefix("run ")?.split_whitespace().next())
            .unwrap_or_else(|| panic!("no run id in stderr:\n{}", self.stderr))
            .to_owned()
    }
}

/// The folder the Python and JavaScript toolchains are installed in for
/// the tests (once per machine; `weft plugin build` installs them).
pub fn toolchains() -> PathBuf {
    root().join("target").join("toolchains")
}

/// A compiled-code cache the tests that load large components share, so
/// that each is compiled once per machine, not once per test.
pub fn shared_cache() -> PathBuf {
    root().join("target").join("test-cache")
}

/// The component built by `weft plugin build` from the project `dir`
/// (relative to the workspace), once per test process: its path.
pub fn built(dir: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = built.get(dir) {
        return path.clone();
    }
    let out = root().join("target").join("lang-plugins");
    let run = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["plugin", "build"])
        .arg(root().join(dir))
        .arg("--out")
        .arg(&out)
        .env("WEFT_TOOLCHAINS", toolchains())
        .env("WEFT_CACHE_DIR", shared_cache())
        .env("WEFT_DATA_DIR", root().join("target").join("lang-data"))
        .output()
        .expect("weft runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "weft plugin build {dir} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // "built NAME@VERSION DIGEST -> PATH (...)"
    let path = stdout
        .split(" -> ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no path in: {stdout}"));
    built.insert(dir.to_owned(), path.clone());
    path
}
