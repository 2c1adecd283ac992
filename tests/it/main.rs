//! weft's end-to-end tests, in one binary so the suite links once: the real
//! `weft` binary, real components built from source, real redb files, real
//! HTTP on loopback. `common` holds the shared fixtures (scratch data
//! directories, a served host, waits). A test that draws random numbers
//! takes its seed from `WEFT_TEST_SEED` when set, and prints it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod admission;
mod backup;
mod behaviour;
mod browser;
mod cli;
mod cluster;
mod commands;
mod control;
mod crash;
mod cron;
mod deploy;
mod disk;
mod durability;
mod egress;
mod fuzz;
mod handlers;
mod hostile;
mod hosts;
mod languages;
mod messages;
mod observe;
mod operate;
mod retention;
mod sandbox;
mod snapshots;
mod subflow;
mod tenants;
mod timers;
mod wtest;
