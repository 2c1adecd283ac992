//! weft: a durable workflow host whose steps are sandboxed WebAssembly
//! components.
//!
//! This crate is the host as a library: [`Host`] starts one in the order
//! recovery needs; [`services`] holds each operation's one entrance,
//! deploying and serving workflows among them; [`hub`]
//! delivers messages; [`api`] is the HTTP API of `weft serve`; [`traces`]
//! sends runs as OpenTelemetry traces; [`cases`] plays workflows' test
//! cases on the stepped engine (`weft test`). With the `sim` feature,
//! [`sim`] is the deterministic simulator (weft-sim). The layers
//! below are crates of their own, re-exported here:
//!
//! - [`core`] (weft-core): time, digests, names, effects, error records;
//! - [`model`] (weft-model): workflow files into a [`Workflow`];
//! - [`runtime`] (weft-runtime): plugins in wasmtime, a sandbox that grants
//!   nothing by default;
//! - [`store`] (weft-store): every durable fact, in redb;
//! - [`engine`] (weft-engine): one state machine per run, one commit per
//!   step attempt, commits grouped across runs; [`plugins`] finds the
//!   plugin a step `uses:`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use weft::{Engine, PluginDir, RedbStore, Runtime, RuntimeConfig, SystemClock, model};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let plugins = PluginDir::new(runtime, "plugins");
//! let store = Arc::new(RedbStore::open("weft.redb")?);
//! let engine = Engine::new(store, plugins, Arc::new(SystemClock))?;
//! let workflow = Arc::new(model::load("examples/order.yaml")?);
//! let run = engine.run(workflow, serde_json::json!({}), Box::new(weft::engine::Quiet))?;
//! println!("{:?}: {:?}", run.state, run.outputs);
//! # Ok(())
//! # }
//! ```

pub mod api;
pub mod cases;
mod host;
pub mod hub;
pub mod services;
pub mod traces;

pub use weft_core as core;
pub use weft_core::clock;
pub use weft_engine as engine;
pub use weft_engine::plugins;
pub use weft_model as model;
pub use weft_runtime as runtime;
#[cfg(feature = "sim")]
pub use weft_sim as sim;
pub use weft_store as store;

pub use host::{Host, HostConfig, HostError, HostEvents, Traced, start_sweeper};
pub use services::Services;
pub use services::deployments::{DeployError, Deployed, Deployments};
pub use weft_core::{Clock, SimClock, SystemClock, Timestamp};
pub use weft_engine::Engine;
pub use weft_engine::plugins::PluginDir;
pub use weft_model::{Workflow, WorkflowDir};
pub use weft_runtime::{Plugin, Runtime, RuntimeConfig};
pub use weft_store::{PostgresStore, RedbStore, Store};
