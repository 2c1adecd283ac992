//! Step progress on stderr: a spinner per step on a terminal, plain lines
//! otherwise.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use weft::core::lock;
use weft::engine::Observer;
use weft::model::Step;
use weft::store::{RunRecord, StepRecord};

/// Shows one run's progress. Clones share the display, so the command can
/// clear it while the engine holds the observer.
#[derive(Clone)]
pub struct Progress(Arc<Mutex<State>>);

struct State {
    tty: bool,
    bar: Option<ProgressBar>,
    /// The workflow's number of top-level steps.
    total: usize,
    /// What each step started so far uses, by step id.
    uses: HashMap<String, String>,
}

impl Progress {
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(State {
            tty: std::io::stderr().is_terminal(),
            bar: None,
            total: 0,
            uses: HashMap::new(),
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.0)
    }

    /// Removes a spinner still on screen.
    pub fn clear(&self) {
        self.state().clear();
    }
}

impl State {
    fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn run_created(&mut self, run: &RunRecord) {
        eprintln!("run {} of {} started", run.id, run.workflow);
    }

    fn run_resumed(&mut self, run: &RunRecord) {
        eprintln!(
            "run {} of {} resumed at step {} of {}",
            run.id,
            run.workflow,
            run.next_step + 1,
            run.step_count
        );
    }

    fn step_started(&mut self, step: &Step, index: usize, total: usize, attempt: u32) {
        let mut state = self.state();
        let this = &mut *state;
        let uses = step
            .call()
            .map(|call| call.uses.to_string())
            .unwrap_or_default();
        this.total = total;
        this.uses.insert(step.id.clone(), uses.clone());
        if this.tty {
            let mut label = format!("[{}/{}] {} ({uses})", index + 1, total, step.id);
            if attempt > 1 {
                label.push_str(&format!(" attempt {attempt}"));
            }
            this.clear();
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(label);
            bar.enable_steady_tick(Duration::from_millis(80));
            this.bar = Some(bar);
        }
    }

    /// Steps of one run can finish in any order (`parallel`), so the line
    /// is built from the record: its path names the iteration.
    fn step_finished(&mut self, record: &StepRecord) {
        let mut state = self.state();
        state.clear();
        let uses = state
            .uses
            .get(&record.step_id)
            .map(String::as_str)
            .unwrap_or_default();
        let path = if record.path.is_empty() {
            &record.step_id
        } else {
            &record.path
        };
        let mut label = format!("[{}/{}] {path} ({uses})", record.index + 1, state.total);
        if record.attempt > 1 {
            label.push_str(&format!(" attempt {}", record.attempt));
        }
        let took = format_micros(record.duration_us);
        let line = match (&record.error, record.retry_in_ms) {
            _ if record.skipped => format!("skip {label} (if: false)"),
            (None, _) if record.awaiting => format!(
                "wait {label}: for an answer, which only a `weft serve` takes (`weft act {} {path} complete --output JSON`); it ends by its timeout, else Ctrl-C",
                record.run_id
            ),
            (None, _) if record.output.is_none() => match (&record.child, &record.timer) {
                (Some(child), _) => format!("wait {label}: for its child run {child}"),
                (None, Some(timer)) => format!("wait {label}: asleep until {}", timer.due),
                (None, None) => format!("ok   {label} {took}"),
            },
            (None, _) => format!("ok   {label} {took}"),
            (Some(error), Some(delay)) => format!(
                "FAIL {label} {took}: {}: {} (retrying in {})",
                error.code,
                error.message,
                format_micros(delay.saturating_mul(1000))
            ),
            (Some(error), None) => {
                format!("FAIL {label} {took}: {}: {}", error.code, error.message)
            }
        };
        eprintln!("{line}");
    }
}

/// `850µs`, `12.3ms`, `4.20s`.
pub fn format_micros(micros: u64) -> String {
    if micros < 1_000 {
        format!("{micros}µs")
    } else if micros < 1_000_000 {
        format!("{:.1}ms", micros as f64 / 1e3)
    } else {
        format!("{:.2}s", micros as f64 / 1e6)
    }
}
