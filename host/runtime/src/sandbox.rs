//! What a guest gets: the state of one call's store. WASI is linked because
//! every component built by a standard toolchain imports it, but the context
//! grants nothing: no files, no network, no environment variables, no
//! arguments, no stdin. Clocks and random numbers work. stdout and stderr go
//! to the call's log. A command step ([`super::command`]) gets its input on
//! stdin, its step's arguments and environment, and its stdout kept as its
//! output. The weft capabilities (`log`, `kv`, `outbox`,
//! `secrets`, `snapshot`) and `wasi:http/outgoing-handler`, whose every request passes
//! the step's grants ([`HttpHooks`]), are the only other imports.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};
use weft_core::egress::Egress;

use wasmtime_wasi::p2::pipe::MemoryInputPipe;

use super::budget::HostBytes;
use super::command::{CommandLine, Stdout};
use super::http::{HttpHooks, HttpLimits};
use super::kv::{KvAccess, KvState};
use super::limits::CallLimiter;
use super::log::{GuestOutput, LogSink};
use super::secrets::Secrets;
use super::wait::WaitBound;
use weft_core::LogSource;

/// The data of one call's `wasmtime::Store`.
pub(super) struct StepState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: CallLimiter,
    /// What the host holds for the call outside its memory, bounded by its
    /// memory limit.
    pub(super) held: HostBytes,
    pub(super) log: LogSink,
    pub(super) kv: KvState,
    pub(super) outbox: super::outbox::OutboxState,
    pub(super) secrets: Secrets,
    pub(super) snapshots: Option<super::snapshot::SharedSnapshots>,
    http_ctx: WasiHttpCtx,
    pub(super) http: HttpHooks,
    /// When the call's waits in the host end ([`super::wait`]).
    bound: WaitBound,
    /// A command's stdout, its output.
    pub(super) stdout: Option<Stdout>,
    /// Entries from the guest into the host, counted only in the store of
    /// a spare instance (`plugin/spare.rs`), whose making must have none.
    pub(super) host_calls: u64,
}

/// What one call may reach beyond its own memory.
#[derive(Debug, Default)]
pub(super) struct Reach {
    pub(super) kv: Option<KvAccess>,
    pub(super) egress: Option<Arc<Egress>>,
    pub(super) http_limits: HttpLimits,
    pub(super) secrets: Secrets,
    pub(super) snapshots: Option<super::snapshot::SharedSnapshots>,
    /// The `traceparent` the call's outgoing requests carry.
    pub(super) traceparent: Option<String>,
    /// Set when the call's run ended: its waits in the host end too.
    pub(super) cancel: Option<Arc<AtomicBool>>,
    /// The call's place in the share of the cores, given back while it
    /// waits in the host.
    pub(super) turn: Option<Arc<super::share::Turn>>,
    /// A command's stdin, arguments and environment.
    pub(super) stdio: Option<Stdio>,
}

/// What a command step is given, beyond every step's sandbox.
#[derive(Debug, Clone)]
pub(super) struct Stdio {
    /// The program's name, its first argument: the plugin's name.
    pub(super) program: String,
    /// The step's input.
    pub(super) stdin: bytes::Bytes,
    /// The step's arguments and environment.
    pub(super) line: CommandLine,
}

impl std::fmt::Debug for StepState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepState")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl StepState {
    pub(super) fn new(memory_limit: u64, log: LogSink, reach: Reach, deadline: Instant) -> Self {
        // The builder's defaults deny every socket address and name lookup,
        // open no directory, and pass no environment or arguments.
        let held = HostBytes::new(memory_limit);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(GuestOutput::new(log.clone(), LogSource::Stderr))
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false);
        let stdout = match reach.stdio {
            Some(stdio) => {
                let stdout = Stdout::new(held.clone());
                wasi.stdin(MemoryInputPipe::new(stdio.stdin))
                    .stdout(stdout.clone())
                    .arg(&stdio.program)
                    .args(&stdio.line.args)
                    .envs(&stdio.line.env);
                Some(stdout)
            }
            None => {
                wasi.stdout(GuestOutput::new(log.clone(), LogSource::Stdout));
                None
            }
        };
        let wasi = wasi.build();
        let mut http_ctx = WasiHttpCtx::new();
        http_ctx.set_field_size_limit(crate::http::FIELDS_BYTES);
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: CallLimiter::new(memory_limit),
            held: held.clone(),
            log,
            kv: KvState::new(reach.kv),
            outbox: super::outbox::OutboxState::default(),
            secrets: reach.secrets,
            snapshots: reach.snapshots,
            http_ctx,
            http: HttpHooks::new(reach.egress, reach.http_limits, deadline)
                .tracing(reach.traceparent)
                .charging(held),
            bound: WaitBound::new(deadline, reach.cancel, reach.turn),
            stdout,
            host_calls: 0,
        }
    }

    /// Drops every resource the guest still holds (a call's last act: the
    /// instance is not called again), so that what the host reads at the
    /// other end of a stream sees it end.
    pub(super) fn close_resources(&mut self) {
        drop(std::mem::replace(&mut self.table, ResourceTable::new()));
    }

    /// Waits for `operation` in the host, bounded as the guest's own waits
    /// are: by the call's deadline and its run's cancellation.
    pub(super) fn wait_in_host<F: std::future::Future>(
        &self,
        operation: F,
    ) -> wasmtime::Result<F::Output> {
        self.bound.wait(operation)
    }

    /// The resource table, and when waits on its resources must end.
    pub(super) fn io(&mut self) -> (&mut ResourceTable, &WaitBound) {
        (&mut self.table, &self.bound)
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

impl WasiHttpView for StepState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http_ctx,
            table: &mut self.table,
            hooks: &mut self.http,
        }
    }
}

/// Links WASI preview 2, whose grants come from [`StepState::new`], and
/// `wasi:http`'s outgoing handler and types; `wasi:io`'s waits are then
/// re-linked to end at the call's deadline or cancel ([`super::wait`]).
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(linker)?;
    super::http::add_fields_to_linker(linker)?;
    super::wait::add_to_linker(linker)
}
