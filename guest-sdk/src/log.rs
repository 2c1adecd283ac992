//! Lines for the run's log. Each call appends one line; the host also
//! forwards it to its own tracing output.
//!
//! Anything a step prints to stdout or stderr reaches the run's log too, as
//! `info` and `warn` lines.

use crate::__private::bindings::weft::plugin::log::{Level, log};

/// Logs at `trace` level.
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message.as_ref());
}

/// Logs at `debug` level.
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message.as_ref());
}

/// Logs at `info` level.
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message.as_ref());
}

/// Logs at `warn` level.
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message.as_ref());
}

/// Logs at `error` level.
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message.as_ref());
}
