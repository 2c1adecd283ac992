//! Command steps: a plain WASI program (a component that exports
//! `wasi:cli/run`, or a preview-1 command module wrapped by the preview-1
//! command adapter) runs as a step. Its input is the JSON on its stdin, its
//! output the one JSON value it writes to stdout; its arguments and
//! environment are only those its step gives; its stderr lines are its log.
//! It exits 0 for success, [`EXIT_RETRYABLE`] for a failure worth another
//! attempt, anything else for a fatal one; a failed command may also write
//! its error to stdout as `{"error": {"code", "message", "retryable",
//! "details"}}`, which is the step's error (a program whose toolchain
//! reports only failure, not the status, tells a retryable error so). The sandbox is every step's:
//! a fresh instance, the deadline, the memory cap, no files, no sockets,
//! `wasi:http` only with a grant.
//!
//! Such a program does not describe itself, so its name, version and
//! schemas are recorded in it, in a custom section of the component
//! ([`DESCRIPTION_SECTION`]), by [`describe_command`] (`weft plugin add
//! --name --version`). The bytes then load anywhere, as any plugin does.

use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmparser::BinaryReader;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use crate::budget::{HostBytes, OverBudget};
use crate::error::LoadError;

/// The name of the custom section that describes a command component.
pub const DESCRIPTION_SECTION: &str = "weft-plugin-description";

/// The exit status of a failure worth another attempt (`EX_TEMPFAIL` of
/// `sysexits.h`). Every other status but 0 is a fatal failure.
pub const EXIT_RETRYABLE: i32 = 75;

/// The `wasi:cli/run` export that makes a component a command.
pub(crate) const RUN_EXPORT: &str = "wasi:cli/run@0.2";

/// How a step runs a command: its arguments (after the program's name,
/// which is the plugin's) and its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// The arguments, without the program's name.
    pub args: Vec<String>,
    /// The environment variables (a workflow's, sorted by name).
    pub env: Vec<(String, String)>,
}

/// What is recorded in a command component: what a `weft:plugin/step`
/// component answers to `describe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// The name workflows use in `uses:`.
    pub name: String,
    /// A semantic version.
    pub version: String,
    /// One line for people.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the step's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The JSON Schema of the step's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// Records `description` in the command in `bytes`, and returns the
/// component to add. A preview-1 command module (`wasm32-wasip1`, Go's
/// `GOOS=wasip1`) is first wrapped into a component by the preview-1
/// command adapter of this host's wasmtime. A description recorded before
/// is replaced. The result is checked only as far as its shape: loading it
/// ([`Runtime::load`](crate::Runtime::load)) checks the rest.
pub fn describe_command(bytes: &[u8], description: &Description) -> Result<Vec<u8>, LoadError> {
    crate::plugin::check_name_version(&description.name, &description.version)
        .map_err(LoadError::Description)?;
    let component = match header(bytes)? {
        Header::Component => bytes.to_vec(),
        Header::Module => wit_component::ComponentEncoder::default()
            .module(bytes)
            .and_then(|encoder| {
                encoder.adapter(
                    "wasi_snapshot_preview1",
                    wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
                )
            })
            .and_then(|mut encoder| encoder.encode())
            .map_err(|e| LoadError::Wrap(format!("{e:#}")))?,
    };
    let mut out = Vec::with_capacity(component.len());
    out.extend_from_slice(component.get(..8).unwrap_or_default());
    each_section(&component, |section| {
        if section.custom != Some(DESCRIPTION_SECTION) {
            out.extend_from_slice(&component[section.range]);
        }
    })
    .map_err(LoadError::Compile)?;
    let data = serde_json::to_vec(description)
        .map_err(|e| LoadError::Description(format!("cannot encode it: {e}")))?;
    if data.len() > MAX_DESCRIPTION {
        return Err(LoadError::Description(format!(
            "it is {} bytes, over the {MAX_DESCRIPTION} a description may be",
            data.len()
        )));
    }
    wasm_encoder::ComponentSection::append_to_component(
        &wasm_encoder::CustomSection {
            name: DESCRIPTION_SECTION.into(),
            data: data.into(),
        },
        &mut out,
    );
    Ok(out)
}

/// The description recorded in a command component, if it has one: the
/// last [`DESCRIPTION_SECTION`] among its own sections (not its modules').
/// Sections are read as they come: nothing is kept but the last
/// description's place.
pub(crate) fn read_description(bytes: &[u8]) -> Result<Option<Description>, String> {
    let mut last = None;
    each_section(bytes, |section| {
        if section.custom == Some(DESCRIPTION_SECTION) {
            last = Some(section.data);
        }
    })?;
    let Some(data) = last else {
        return Ok(None);
    };
    if data.len() > MAX_DESCRIPTION {
        return Err(format!(
            "its `{DESCRIPTION_SECTION}` section is {} bytes, over the {MAX_DESCRIPTION} a description may be",
            data.len()
        ));
    }
    serde_json::from_slice(&bytes[data])
        .map(Some)
        .map_err(|e| format!("its `{DESCRIPTION_SECTION}` section is not a description: {e}"))
}

/// The largest description (its JSON, schemas included).
const MAX_DESCRIPTION: usize = 1 << 20;

enum Header {
    Module,
    Component,
}

fn header(bytes: &[u8]) -> Result<Header, LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm);
    }
    Ok(if bytes[4..8] == [1, 0, 0, 0] {
        Header::Module
    } else {
        Header::Component
    })
}

/// One top-level section of a component.
struct Section<'a> {
    /// The whole section: its id, size and contents.
    range: Range<usize>,
    /// A custom section's name.
    custom: Option<&'a str>,
    /// A custom section's data.
    data: Range<usize>,
}

/// Calls `visit` with each of the component's own sections, in order;
/// nested modules and components are inside them, and not looked into.
/// Holds nothing per section, whatever their number.
fn each_section<'a>(bytes: &'a [u8], mut visit: impl FnMut(Section<'a>)) -> Result<(), String> {
    let broken = |e: wasmparser::BinaryReaderError| format!("a malformed component: {e}");
    let mut reader = BinaryReader::new(bytes.get(8..).unwrap_or_default(), 8);
    while !reader.eof() {
        let start = reader.original_position();
        let id = reader.read_u8().map_err(broken)?;
        let size = reader.read_var_u32().map_err(broken)? as usize;
        let body = reader.original_position();
        let end = body
            .checked_add(size)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| {
                format!("a malformed component: section {id} at {start} runs past the end")
            })?;
        let (custom, data) = if id == 0 {
            let mut inner = BinaryReader::new(&bytes[body..end], body);
            let name = inner.read_string().map_err(broken)?;
            (Some(name), inner.original_position()..end)
        } else {
            (None, body..end)
        };
        visit(Section {
            range: start..end,
            custom,
            data,
        });
        reader.read_bytes(size).map_err(broken)?;
    }
    Ok(())
}

/// A command's stdout: what it writes is its output, kept in the host and
/// charged to the call's budget of host-held bytes (the step's memory
/// limit). Past the budget, the write traps: the call fails
/// `resource_limit`, naming the budget.
#[derive(Debug, Clone)]
pub(crate) struct Stdout {
    /// The writes, as they came: no buffer grows past what was charged.
    chunks: Arc<Mutex<Vec<bytes::Bytes>>>,
    held: HostBytes,
}

impl Stdout {
    pub(crate) fn new(held: HostBytes) -> Self {
        Self {
            chunks: Arc::default(),
            held,
        }
    }

    /// What was written, in one piece, taken out. The piece is charged
    /// too (the writes stay charged: the budget is the call's, and ends
    /// with it), so the host never holds more than the budget; `Err` names
    /// it when the piece would go past.
    pub(crate) fn take(&self) -> Result<Vec<u8>, String> {
        let chunks = std::mem::take(&mut *weft_core::lock(&self.chunks));
        let total = chunks.iter().map(bytes::Bytes::len).sum();
        self.held
            .charge("the output written to stdout, joined", total)?;
        let mut bytes = Vec::with_capacity(total);
        for chunk in chunks {
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    fn keep(&self, bytes: bytes::Bytes) -> Result<(), OverBudget> {
        self.held
            .charge("the output written to stdout", bytes.len())
            .map_err(|_| OverBudget)?;
        weft_core::lock(&self.chunks).push(bytes);
        Ok(())
    }
}

impl IsTerminal for Stdout {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Stdout {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Stdout {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.keep(bytes)
            .map_err(|over| StreamError::Trap(wasmtime::Error::new(over)))
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Stdout {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Stdout {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.keep(bytes::Bytes::copy_from_slice(buf))
                .map(|()| buf.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(name: &str) -> Description {
        Description {
            name: name.to_owned(),
            version: "1.0.0".to_owned(),
            description: String::new(),
            input_schema: None,
            output_schema: None,
        }
    }

    /// The smallest component: its header alone.
    const EMPTY: &[u8] = b"\0asm\x0d\0\x01\0";

    #[test]
    fn a_description_is_recorded_once_and_read_back() {
        let once = describe_command(EMPTY, &described("one")).unwrap();
        assert_eq!(read_description(&once).unwrap(), Some(described("one")));
        // Described again, the old description goes.
        let twice = describe_command(&once, &described("two")).unwrap();
        assert_eq!(read_description(&twice).unwrap(), Some(described("two")));
        let mut custom = 0;
        each_section(&twice, |s| custom += usize::from(s.custom.is_some())).unwrap();
        assert_eq!(custom, 1);
        assert_eq!(read_description(EMPTY).unwrap(), None);
    }

    #[test]
    fn bad_names_versions_and_bytes_are_refused() {
        let mut bad = described("a b");
        assert!(describe_command(EMPTY, &bad).is_err());
        bad.name = "ok".to_owned();
        bad.version = "one".to_owned();
        assert!(describe_command(EMPTY, &bad).is_err());
        assert_eq!(
            describe_command(b"hello", &described("ok")),
            Err(LoadError::NotWasm)
        );
        // A section that claims more bytes than there are.
        let truncated = [EMPTY, &[0, 50, 1, b'x']].concat();
        assert!(
            read_description(&truncated)
                .unwrap_err()
                .contains("malformed")
        );
    }
}
