//! The `weft` command line.

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than the system's allocator: the committing thread frees
/// much of what the workers allocated (a step's records, a run's state
/// when it ends), and glibc's free of another thread's memory took a
/// fifth of that thread's time (see the history of measurements in
/// docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let spans = match cli::init_tracing(args.verbose, args.log_format, args.otlp_endpoint()) {
        Ok(spans) => spans,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(cli::EXIT_INVALID);
        }
    };
    let code = match cli::main(args) {
        Ok(code) => code,
        Err(error) if cli::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(cli::EXIT_HOST)
        }
    };
    if let Some(provider) = spans
        && let Err(e) = provider.shutdown()
    {
        eprintln!("warning: the last spans were not sent: {e}");
    }
    code
}
