//! The `log` capability and the capture of a guest's stdout and stderr.
//!
//! Both feed one [`LogSink`] per call, so lines keep their order. Lines go to
//! the host's `tracing` output (target `weft::guest`) as they arrive, and are
//! returned with the call's outcome for the run's record. A call may log up
//! to its byte budget; past it, lines are counted and dropped, never an error
//! the guest sees, so logging can't make a step fail.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::bindings;
use super::sandbox::StepState;
use super::secrets::Redactor;
use weft_core::{LogLevel, LogLine, LogSource};

/// A line longer than this is cut, and says so.
const MAX_LINE: usize = 8 * 1024;

/// Collects one call's log lines.
#[derive(Debug, Clone)]
pub(super) struct LogSink(Arc<Mutex<SinkState>>);

#[derive(Debug)]
struct SinkState {
    lines: Vec<LogLine>,
    budget: usize,
    dropped: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    plugin: String,
    step: String,
    redactor: Redactor,
}

impl LogSink {
    /// A sink that keeps up to `budget` bytes of lines.
    pub(super) fn new(budget: usize, plugin: &str, step: &str) -> Self {
        Self(Arc::new(Mutex::new(SinkState {
            lines: Vec::new(),
            budget,
            dropped: 0,
            stdout: Vec::new(),
            stderr: Vec::new(),
            plugin: plugin.to_owned(),
            step: step.to_owned(),
            redactor: Redactor::default(),
        })))
    }

    /// The same sink, replacing secret values in every line it keeps.
    pub(super) fn redacting(self, redactor: Redactor) -> Self {
        self.state().redactor = redactor;
        self
    }

    fn state(&self) -> MutexGuard<'_, SinkState> {
        // A panic while holding the lock leaves only log lines behind: keep going.
        weft_core::lock(&self.0)
    }

    pub(super) fn push(&self, level: LogLevel, source: LogSource, message: &str) {
        self.state().push(level, source, message);
    }

    fn write(&self, source: LogSource, bytes: &[u8]) {
        let mut state = self.state();
        let level = if source == LogSource::Stderr {
            LogLevel::Warn
        } else {
            LogLevel::Info
        };
        let mut pending = std::mem::take(state.buffer(source));
        pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(newline) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[start..start + newline]).into_owned();
            state.push(level, source, line.trim_end_matches('\r'));
            start += newline + 1;
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            let line = String::from_utf8_lossy(&pending).into_owned();
            state.push(level, source, &line);
            pending.clear();
        }
        *state.buffer(source) = pending;
    }

    /// The lines so far, including unterminated output and a note of dropped
    /// lines. Call once, after the guest has returned.
    pub(super) fn finish(&self) -> Vec<LogLine> {
        let mut state = self.state();
        for source in [LogSource::Stdout, LogSource::Stderr] {
            let rest = std::mem::take(state.buffer(source));
            if !rest.is_empty() {
                let level = if source == LogSource::Stderr {
                    LogLevel::Warn
                } else {
                    LogLevel::Info
                };
                let line = String::from_utf8_lossy(&rest).into_owned();
                state.push(level, source, &line);
            }
        }
        if state.dropped > 0 {
            let note = format!(
                "{} log line(s) dropped: the step logged more than its limit",
                state.dropped
            );
            state.dropped = 0;
            state.lines.push(LogLine {
                level: LogLevel::Warn,
                source: LogSource::Host,
                message: note,
            });
        }
        std::mem::take(&mut state.lines)
    }

    /// What the guest last wrote to stderr, to explain a trap: a Rust panic
    /// message goes there. Blank lines and the standard backtrace hint are
    /// left out.
    pub(super) fn stderr_tail(&self) -> Option<String> {
        let state = self.state();
        let pending = String::from_utf8_lossy(&state.stderr).into_owned();
        let mut tail: Vec<&str> = state
            .lines
            .iter()
            .filter(|l| l.source == LogSource::Stderr)
            .map(|l| l.message.as_str())
            .chain(std::iter::once(pending.as_str()))
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let keep = tail.len().saturating_sub(3);
        tail.drain(..keep);
        (!tail.is_empty()).then(|| state.redactor.redact(&tail.join(" ")))
    }
}

impl SinkState {
    fn buffer(&mut self, source: LogSource) -> &mut Vec<u8> {
        match source {
            LogSource::Stderr => &mut self.stderr,
            _ => &mut self.stdout,
        }
    }

    fn push(&mut self, level: LogLevel, source: LogSource, message: &str) {
        let mut message = if self.redactor.is_empty() {
            message.to_owned()
        } else {
            self.redactor.redact(message)
        };
        if message.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [line cut]");
        }
        if message.len() > self.budget {
            self.dropped += 1;
            return;
        }
        self.budget -= message.len();
        let (plugin, step) = (self.plugin.as_str(), self.step.as_str());
        match level {
            LogLevel::Trace => tracing::trace!(target: "weft::guest", plugin, step, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "weft::guest", plugin, step, "{message}"),
            LogLevel::Info => tracing::info!(target: "weft::guest", plugin, step, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "weft::guest", plugin, step, "{message}"),
            LogLevel::Error => tracing::error!(target: "weft::guest", plugin, step, "{message}"),
        }
        self.lines.push(LogLine {
            level,
            source,
            message,
        });
    }
}

/// Links `weft:plugin/log` of every contract version into `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    bindings::v1::weft::plugin::log::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)?;
    bindings::v2::weft::plugin::log::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)?;
    bindings::v3::weft::plugin::log::add_to_linker::<StepState, HasSelf<StepState>>(linker, |s| s)
}

bindings::for_each_contract!(log => impl contract::Host for StepState {
    fn log(&mut self, level: contract::Level, message: String) {
        use contract::Level;
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.log.push(level, LogSource::Log, &message);
    }
});

/// A guest's stdout or stderr, written into a [`LogSink`]. Writes never fail
/// and never block.
#[derive(Debug, Clone)]
pub(super) struct GuestOutput {
    sink: LogSink,
    source: LogSource,
}

impl GuestOutput {
    pub(super) fn new(sink: LogSink, source: LogSource) -> Self {
        Self { sink, source }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.sink.write(self.source, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.sink.write(self.source, buf);
        Poll::Ready(Ok(buf.len()))
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

    #[test]
    fn output_is_split_into_lines_in_order() {
        let sink = LogSink::new(1024, "p", "s");
        sink.write(LogSource::Stdout, b"one\ntw");
        sink.push(LogLevel::Info, LogSource::Log, "from log");
        sink.write(LogSource::Stdout, b"o\r\nthree");
        sink.write(LogSource::Stderr, b"oops");
        let lines: Vec<_> = sink
            .finish()
            .into_iter()
            .map(|l| (l.source, l.message))
            .collect();
        assert_eq!(
            lines,
            [
                (LogSource::Stdout, "one".to_owned()),
                (LogSource::Log, "from log".to_owned()),
                (LogSource::Stdout, "two".to_owned()),
                (LogSource::Stdout, "three".to_owned()),
                (LogSource::Stderr, "oops".to_owned()),
            ]
        );
    }

    #[test]
    fn lines_past_the_budget_are_dropped_and_counted() {
        let sink = LogSink::new(10, "p", "s");
        sink.push(LogLevel::Info, LogSource::Log, "12345");
        sink.push(LogLevel::Info, LogSource::Log, "123456");
        sink.push(LogLevel::Info, LogSource::Log, "1234");
        let lines = sink.finish();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1].message, "1234");
        assert_eq!(lines[2].source, LogSource::Host);
        assert!(lines[2].message.starts_with("1 log line(s) dropped"));
    }
}
