//! Reports what the sandbox lets a guest see, so a test can check that
//! nothing is granted beyond what `run` needs, and the step context the
//! host gave it (its tenant and workflow).

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

fn probe(ctx: &Context, _input: Value) -> Result<Value, StepError> {
    let root = std::fs::read_dir("/").map(|entries| entries.count());
    let cwd_file = std::fs::read_to_string("Cargo.toml");
    let tcp = std::net::TcpStream::connect("127.0.0.1:9");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    println!("probe on stdout");
    eprintln!("probe on stderr");
    Ok(json!({
        "env": std::env::vars().count(),
        "args": std::env::args().count(),
        "read_root": root.is_ok(),
        "read_file": cwd_file.is_ok(),
        "tcp_connect": tcp.is_ok(),
        "clock_works": now > 1_600_000_000,
        "tenant": ctx.tenant,
        "workflow": ctx.workflow,
    }))
}

weft_sdk::export_step!(probe, name = "probe");
