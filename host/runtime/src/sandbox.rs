//! What a guest gets: the state of one call's store. WASI is linked because
//! every component built by a standard toolchain imports it, but the context
//! grants nothing: no files, no network, no environment variables, no
//! arguments, no stdin. Clocks and random numbers work. stdout and stderr go
//! to the call's log. The weft capabilities (`log`, `kv`, `outbox`) are the
//! only other imports.

use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::kv::{KvAccess, KvState};
use super::limits::CallLimiter;
use super::log::{GuestOutput, LogSink};
use weft_core::LogSource;

/// The data of one call's `wasmtime::Store`.
pub(super) struct StepState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: CallLimiter,
    pub(super) log: LogSink,
    pub(super) kv: KvState,
    pub(super) outbox: super::outbox::OutboxState,
}

impl std::fmt::Debug for StepState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepState")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl StepState {
    pub(super) fn new(memory_limit: u64, log: LogSink, kv: Option<KvAccess>) -> Self {
        // The builder's defaults deny every socket address and name lookup,
        // open no directory, and pass no environment or arguments.
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput::new(log.clone(), LogSource::Stdout))
            .stderr(GuestOutput::new(log.clone(), LogSource::Stderr))
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: CallLimiter::new(memory_limit),
            log,
            kv: KvState::new(kv),
            outbox: super::outbox::OutboxState::default(),
        }
    }
}

impl WasiView for StepState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Links WASI preview 2, whose grants come from [`StepState::new`].
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)
}
