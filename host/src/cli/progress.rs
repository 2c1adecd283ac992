//! Step progress on stderr: a spinner per step on a terminal, plain lines
//! otherwise.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
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
    label: String,
}

impl Progress {
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(State {
            tty: std::io::stderr().is_terminal(),
            bar: None,
            label: String::new(),
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
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
        this.label = format!("[{}/{}] {} ({uses})", index + 1, total, step.id);
        if attempt > 1 {
            this.label.push_str(&format!(" attempt {attempt}"));
        }
        if this.tty {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(this.label.clone());
            bar.enable_steady_tick(Duration::from_millis(80));
            this.bar = Some(bar);
        }
    }

    fn step_finished(&mut self, record: &StepRecord) {
        let mut state = self.state();
        state.clear();
        let label = &state.label;
        let took = format_micros(record.duration_us);
        let line = match (&record.error, record.retry_in_ms) {
            _ if record.skipped => format!("skip {label} (if: false)"),
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
