//! A plain WASI program, built for `wasm32-wasip2` with no weft SDK: it
//! reads its input from stdin and writes its output to stdout. What it does
//! is the input's `do`:
//!
//! - `echo`: writes `{input, args, env, files, stdin_left}`: what it was
//!   given, and whether it can see any file;
//! - `exit`: writes `lines` to stderr, then exits with `status`;
//! - `typed`: writes `error` as its typed error to stdout, and exits 1;
//! - `nothing`: exits 0 having written nothing;
//! - `text`: writes a line that is not JSON;
//! - `two`: writes two JSON values;
//! - `flood`: writes `mib` MiB to stdout;
//! - `sleep`: sleeps `seconds`;
//! - `panic`: panics.

use std::io::{Read, Write};

use serde_json::{Value, json};

// Panicking and unwrapping are what this guest is for.
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
fn main() {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("stdin does not read: {e}");
        std::process::exit(2);
    }
    let input: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("the input is not JSON: {e}");
        std::process::exit(2)
    });
    let mut out = std::io::stdout();
    match input["do"].as_str().unwrap_or("echo") {
        "exit" => {
            for line in input["lines"].as_array().into_iter().flatten() {
                eprintln!("{}", line.as_str().unwrap_or_default());
            }
            let status = input["status"].as_u64().unwrap_or(1);
            // std's `process::exit` on wasm32-wasip2 reports only success
            // or failure; WASI 0.2.12's `exit-with-code` carries the status.
            wasip2::cli::exit::exit_with_code(u8::try_from(status).unwrap_or(1));
            unreachable!("exit-with-code returns");
        }
        "typed" => {
            println!("{}", json!({ "error": input["error"] }));
            std::process::exit(1);
        }
        "nothing" => {}
        "text" => println!("hello, not JSON"),
        "two" => println!("1\n2"),
        "flood" => {
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..input["mib"].as_u64().unwrap_or(100) {
                // A refused write ends the program, as a closed pipe would.
                if out.write_all(&chunk).is_err() {
                    std::process::exit(1);
                }
            }
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(
                input["seconds"].as_u64().unwrap_or(3600),
            ));
            println!("{{\"woke\": true}}");
        }
        "panic" => panic!("the command panics on purpose"),
        _ => {
            let mut rest = Vec::new();
            let left = std::io::stdin().read_to_end(&mut rest).unwrap_or(0);
            let answer = json!({
                "input": input,
                "args": std::env::args().collect::<Vec<_>>(),
                "env": std::env::vars().collect::<Vec<_>>(),
                "files": std::fs::read_dir("/").is_ok() || std::fs::read_dir(".").is_ok(),
                "stdin_left": left,
            });
            eprintln!("echoing");
            serde_json::to_writer(&mut out, &answer).expect("stdout writes");
        }
    }
}
