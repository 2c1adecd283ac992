//! Host waits bounded by the call's deadline and its cancel flag.
//!
//! Epoch interruption stops a guest only while it runs its own code. A
//! guest that waits in the host (a `thread::sleep`, a `poll` on a clock or
//! an HTTP body, a blocking read) is in `wasi:io`'s host functions, which
//! block their thread on a future with no end of their own. This module
//! re-links `wasi:io/poll` and `wasi:io/streams` over wasmtime-wasi's own
//! implementations: a call that does not wait is unchanged, and each
//! blocking one races the deadline and, every [`CANCEL_LOOK`], the cancel
//! flag. Past the deadline the call traps as an epoch interrupt would
//! (`timeout`); once cancelled, with [`Cancelled`]. The thread is free at
//! once either way. Every wait of `wasi:http` (a response, a body) is a
//! pollable or a stream of these interfaces, so it is bounded too.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::Trap;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::io::{poll as async_poll, streams as async_streams};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};

use super::sandbox::StepState;

/// How often a wait looks at the cancel flag: an epoch tick's order.
const CANCEL_LOOK: Duration = Duration::from_millis(5);

/// Why a cancelled call stopped.
#[derive(Debug)]
pub(crate) struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// When a call's waits in the host must end.
#[derive(Debug, Clone)]
pub(crate) struct WaitBound {
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
    turn: Option<Arc<crate::share::Turn>>,
}

impl WaitBound {
    pub(crate) fn new(
        deadline: Instant,
        cancel: Option<Arc<AtomicBool>>,
        turn: Option<Arc<crate::share::Turn>>,
    ) -> Self {
        Self {
            deadline,
            cancel,
            turn,
        }
    }

    /// An error if the call must stop now.
    fn check(&self) -> wasmtime::Result<()> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(wasmtime::Error::new(Cancelled));
        }
        if Instant::now() >= self.deadline {
            return Err(wasmtime::Error::new(Trap::Interrupt));
        }
        Ok(())
    }

    /// Waits for `operation` until the deadline or a cancel, whichever
    /// comes first; blocking, as wasmtime-wasi's own sync waits are.
    pub(crate) fn wait<F: Future>(&self, operation: F) -> wasmtime::Result<F::Output> {
        self.check()?;
        let mut paused = false;
        wasmtime_wasi::runtime::in_tokio(async {
            let mut operation = pin!(operation);
            let mut deadline = pin!(tokio::time::sleep_until(self.deadline.into()));
            let mut look = tokio::time::interval(CANCEL_LOOK);
            std::future::poll_fn(|cx| {
                if let Poll::Ready(done) = operation.as_mut().poll(cx) {
                    return Poll::Ready(Ok(done));
                }
                // Off the CPU once it really waits: the call's turn on the
                // cores goes to another call (it takes one again at its
                // next tick). An operation ready at once keeps it, so a
                // guest that polls or prints in a loop still takes turns.
                if !paused {
                    paused = true;
                    if let Some(turn) = &self.turn {
                        turn.pause();
                    }
                }
                if deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(wasmtime::Error::new(Trap::Interrupt)));
                }
                if let Some(cancel) = &self.cancel {
                    while look.poll_tick(cx).is_ready() {
                        if cancel.load(Ordering::Relaxed) {
                            return Poll::Ready(Err(wasmtime::Error::new(Cancelled)));
                        }
                    }
                }
                Poll::Pending
            })
            .await
        })
    }

    /// [`WaitBound::wait`] for a stream operation: an end of the wait
    /// traps the call through the stream's error.
    fn wait_stream<T, F>(&self, operation: F) -> StreamResult<T>
    where
        F: Future<Output = StreamResult<T>>,
    {
        self.wait(operation)
            .unwrap_or_else(|e| Err(StreamError::Trap(e)))
    }
}

/// What the re-linked interfaces see of a call's state.
pub(crate) struct BoundedIo<'a> {
    table: &'a mut ResourceTable,
    bound: &'a WaitBound,
}

struct HasBoundedIo;

impl HasData for HasBoundedIo {
    type Data<'a> = BoundedIo<'a>;
}

/// Links `wasi:io/poll` and `wasi:io/streams` again, over what
/// `wasmtime_wasi::p2::add_to_linker_sync` linked, with bounded waits. Must
/// come after it. One version of each interface serves every 0.2.x
/// import, so the names replaced are the ones it linked.
pub(crate) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    fn bounded(state: &mut StepState) -> BoundedIo<'_> {
        let (table, bound) = state.io();
        BoundedIo { table, bound }
    }
    linker.allow_shadowing(true);
    let linked = poll::add_to_linker::<StepState, HasBoundedIo>(linker, bounded)
        .and_then(|()| streams::add_to_linker::<StepState, HasBoundedIo>(linker, bounded));
    linker.allow_shadowing(false);
    linked
}

impl poll::Host for BoundedIo<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        self.bound
            .wait(async_poll::Host::poll(self.table, pollables))?
    }
}

impl poll::HostPollable for BoundedIo<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        self.bound
            .wait(async_poll::HostPollable::ready(self.table, pollable))?
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.bound
            .wait(async_poll::HostPollable::block(self.table, pollable))?
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_poll::HostPollable::drop(self.table, pollable)
    }
}

impl streams::Host for BoundedIo<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        Ok(async_streams::Host::convert_stream_error(self.table, err)?.into())
    }
}

impl streams::HostOutputStream for BoundedIo<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        self.bound
            .wait(async_streams::HostOutputStream::drop(self.table, stream))?
    }

    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        async_streams::HostOutputStream::check_write(self.table, stream)
    }

    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        async_streams::HostOutputStream::write(self.table, stream, bytes)
    }

    fn blocking_write_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        bytes: Vec<u8>,
    ) -> StreamResult<()> {
        self.bound
            .wait_stream(async_streams::HostOutputStream::blocking_write_and_flush(
                self.table, stream, bytes,
            ))
    }

    fn blocking_write_zeroes_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        len: u64,
    ) -> StreamResult<()> {
        self.bound.wait_stream(
            async_streams::HostOutputStream::blocking_write_zeroes_and_flush(
                self.table, stream, len,
            ),
        )
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynOutputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        async_streams::HostOutputStream::subscribe(self.table, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        async_streams::HostOutputStream::write_zeroes(self.table, stream, len)
    }

    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        async_streams::HostOutputStream::flush(self.table, Resource::new_borrow(stream.rep()))
    }

    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        self.bound
            .wait_stream(async_streams::HostOutputStream::blocking_flush(
                self.table,
                Resource::new_borrow(stream.rep()),
            ))
    }

    fn splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        async_streams::HostOutputStream::splice(self.table, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        self.bound
            .wait_stream(async_streams::HostOutputStream::blocking_splice(
                self.table, dst, src, len,
            ))
    }
}

impl streams::HostInputStream for BoundedIo<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        self.bound
            .wait(async_streams::HostInputStream::drop(self.table, stream))?
    }

    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        async_streams::HostInputStream::read(self.table, stream, len)
    }

    fn blocking_read(
        &mut self,
        stream: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<Vec<u8>> {
        self.bound
            .wait_stream(async_streams::HostInputStream::blocking_read(
                self.table, stream, len,
            ))
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        async_streams::HostInputStream::skip(self.table, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        self.bound
            .wait_stream(async_streams::HostInputStream::blocking_skip(
                self.table, stream, len,
            ))
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynInputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        async_streams::HostInputStream::subscribe(self.table, stream)
    }
}
