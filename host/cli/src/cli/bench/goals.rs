//! `weft bench --goals`: every performance figure the engine is held to,
//! measured in one sitting, printed on the last lines with its goal beside
//! it; `--plot FILE` draws the scale curve.
//!
//! The parts, in order: the scale curve (which gives the throughput at
//! P=1000 and P=100, S=10), a guest call in each language (a fresh
//! instance per call), memory per run in each waiting state, and start-up
//! with a million ended runs and a hundred thousand running ones.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use weft::{Runtime, RuntimeConfig};

use super::scale::{self, Point};
use super::{percentile, show, startup, timed_calls};

/// What `--goals` measures; smaller figures make a quicker sitting.
pub struct Sizes {
    /// Calls per language.
    pub calls: usize,
    /// Runs per waiting state.
    pub memory: usize,
    /// Ended and running runs in the start-up store.
    pub ended: usize,
    pub running: usize,
}

/// One line of the summary.
struct Line {
    what: String,
    measured: String,
    goal: String,
    met: bool,
}

pub fn goals(plugins: &Path, sizes: &Sizes, plot: Option<&Path>) -> anyhow::Result<ExitCode> {
    out!(
        "weft bench --goals: every figure with its goal; build: {}",
        super::build_kind()
    );
    let mut lines = Vec::new();

    let points = scale::curve(plugins)?;
    if let Some(path) = plot {
        draw(&points, path)?;
        out!("  drawn: {}", path.display());
    }
    for (runs, goal) in [(1_000, 25_000.0), (100, 12_000.0)] {
        if let Some(p) = points.iter().find(|p| p.runs == runs && p.steps == 10) {
            lines.push(Line {
                what: format!("durable steps/s, P={runs} S=10"),
                measured: format!("{:.0}", p.rate),
                goal: format!(">= {goal:.0}"),
                met: p.rate >= goal,
            });
        }
    }
    let flattest = flattest(&points);
    lines.push(Line {
        what: "scale curve: worst drop from one P to the next".to_owned(),
        measured: format!("{:.2}x", flattest),
        goal: "no cliff (< 2x)".to_owned(),
        met: flattest < 2.0,
    });

    out!();
    latency(plugins, sizes.calls, &mut lines)?;

    out!();
    for (state, bytes) in scale::memory(plugins, sizes.memory)? {
        let (goal, text) = match state {
            "parked" => (2_048.0, "<= 2 KB"),
            "resident" => (20_480.0, "<= 20 KB"),
            _ => (0.0, "0 in memory"),
        };
        lines.push(Line {
            what: format!("memory per {state} run ({} runs)", sizes.memory),
            measured: format!("{bytes:.0} B"),
            goal: text.to_owned(),
            // A suspended run's figure is the process's growth, which a
            // store's cache and the allocator make a little above 0: the
            // goal is met when no run stays in memory (checked by the
            // measuring process) and the growth is under 100 bytes a run.
            met: if goal == 0.0 {
                bytes < 100.0
            } else {
                bytes <= goal
            },
        });
    }

    out!();
    let started = startup::figures(plugins, sizes.ended, sizes.running)?;
    let at = |d: Option<Duration>| d.map_or_else(|| "never".to_owned(), show);
    let (first, all) = started.map_or((None, None), |s| (s.first_step, s.all_going));
    lines.push(Line {
        what: format!(
            "start-up, {} ended + {} running: first step",
            sizes.ended, sizes.running
        ),
        measured: at(first),
        goal: "<= 2s".to_owned(),
        met: first.is_some_and(|d| d <= Duration::from_secs(2)),
    });
    lines.push(Line {
        what: format!(
            "start-up, {} ended + {} running: all running going",
            sizes.ended, sizes.running
        ),
        measured: at(all),
        goal: "<= 30s".to_owned(),
        met: all.is_some_and(|d| d <= Duration::from_secs(30)),
    });

    print_goals(&lines)?;
    Ok(ExitCode::SUCCESS)
}

/// A guest call in each language, a fresh instance per call, with its
/// goal: a line each in `lines`.
fn latency(plugins: &Path, calls: usize, lines: &mut Vec<Line>) -> anyhow::Result<()> {
    out!(
        "guest calls: a fresh instance per call, pooling allocator, {} calls each back to back",
        calls
    );
    for (language, name, input, goal) in [
        (
            "Rust",
            "template",
            super::languages::example("template"),
            10.0,
        ),
        (
            "Python",
            "wordstats",
            super::languages::example("wordstats"),
            300.0,
        ),
        (
            "JavaScript",
            "headline",
            super::languages::example("headline"),
            80.0,
        ),
    ] {
        let bytes = super::languages::read_example(plugins, name)?;
        let runtime = Runtime::new(RuntimeConfig::default())?;
        let mut times = timed_calls(&runtime, &bytes, &input.to_string(), calls)?;
        let p50 = percentile(&mut times, 50.0);
        let mut split = split_calls(&runtime, &bytes, &input.to_string(), calls)?;
        out!(
            "  {language:<11} p50 {:>10}  p99 {:>10}   of which instantiate p50 {:>10}, run p50 {:>10}; {:.0} page faults a call, {:.0}% on a spare",
            show(p50),
            show(percentile(&mut times, 99.0)),
            if split.made.is_empty() {
                "-".to_owned()
            } else {
                show(percentile(&mut split.made, 50.0))
            },
            show(percentile(&mut split.ran, 50.0)),
            split.faults,
            split.spares * 100.0
        );
        let micros = p50.as_secs_f64() * 1e6;
        lines.push(Line {
            what: format!("{language} call (instantiate, call, teardown) p50"),
            measured: show(p50),
            goal: format!("<= {goal:.0}µs"),
            met: micros <= goal,
        });
    }

    Ok(())
}

/// `weft bench --latency`: [`latency`] alone, with its goals.
pub fn latency_only(plugins: &Path, calls: usize) -> anyhow::Result<ExitCode> {
    let mut lines = Vec::new();
    latency(plugins, calls, &mut lines)?;
    print_goals(&lines)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the goals' lines.
fn print_goals(lines: &[Line]) -> anyhow::Result<()> {
    out!();
    out!("goals (this machine, this sitting):");
    for line in lines {
        out!(
            "  {:<58} {:>12}   goal {:<16} {}",
            line.what,
            line.measured,
            line.goal,
            if line.met { "met" } else { "MISSED" }
        );
    }
    Ok(())
}

/// What [`split_calls`] found.
struct Split {
    /// The instantiation of each call that made its own instance.
    made: Vec<Duration>,
    /// Each call's run.
    ran: Vec<Duration>,
    /// Minor page faults of the calling thread, per call.
    faults: f64,
    /// The share of calls that found a spare instance ready.
    spares: f64,
}

/// `n` calls' instantiate and run times, as the runtime reports them
/// (the rest of a call is making the store and the teardown), the minor
/// page faults the calling thread took per call, on average (not those of
/// the spare thread), and how many calls found a spare instance (their
/// instantiation is not on their path, and not in the instantiate times).
fn split_calls(runtime: &Runtime, bytes: &[u8], input: &str, n: usize) -> anyhow::Result<Split> {
    let plugin = runtime.load(bytes)?;
    let context = super::bench_context();
    let (mut made, mut ran) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut spares = 0usize;
    let faults_before = thread_minor_faults();
    for _ in 0..n {
        let outcome = plugin.call(&context, input, &weft::runtime::CallOptions::default());
        if let Err(e) = outcome.result {
            anyhow::bail!("{} failed: {e}", plugin.meta().name);
        }
        if outcome.timing.spare.is_some() {
            spares += 1;
        } else {
            made.push(outcome.timing.instantiate);
        }
        ran.push(outcome.timing.call);
    }
    let faults = match (faults_before, thread_minor_faults()) {
        (Some(before), Some(after)) => after.saturating_sub(before) as f64 / n.max(1) as f64,
        _ => f64::NAN,
    };
    Ok(Split {
        made,
        ran,
        faults,
        spares: spares as f64 / n.max(1) as f64,
    })
}

/// The calling thread's minor page faults so far (`minflt`, the tenth
/// field of `/proc/thread-self/stat`); `None` where there is no such file.
fn thread_minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The second field, the command, is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(7)?.parse().ok()
}

/// The largest fall in steps/s from one P to the next at the same S.
fn flattest(points: &[Point]) -> f64 {
    points
        .windows(2)
        .filter(|w| w[0].steps == w[1].steps)
        .map(|w| w[0].rate / w[1].rate.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max)
}

/// Fonts tried for the picture's text, in order.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Draws the curve to `path` (PNG): steps/s and peak RSS against P, one
/// line for each S.
pub fn draw(points: &[Point], path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let font = FONTS
        .iter()
        .find_map(|f| std::fs::read(f).ok())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--plot needs a TrueType font for its text and found none of {}; install fonts-dejavu-core",
                FONTS.join(", ")
            )
        })?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("the font for --plot did not load"))?;
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());

    let root = BitMapBackend::new(path, (1280, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(640);
    let most = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).fold(1.0, f64::max) * 1.1;
    let colours = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    /// One half of the picture.
    struct Panel {
        caption: &'static str,
        unit: &'static str,
        top: f64,
        value: fn(&Point) -> f64,
    }
    let panels = [
        Panel {
            caption: "durable steps/s (every commit synced)",
            unit: "steps/s",
            top: most(&|p| p.rate),
            value: |p| p.rate,
        },
        Panel {
            caption: "peak resident memory",
            unit: "MiB",
            top: most(&|p| p.peak as f64 / 1_048_576.0),
            value: |p| p.peak as f64 / 1_048_576.0,
        },
    ];
    for (area, panel) in [&left, &right].into_iter().zip(panels) {
        let Panel {
            caption,
            unit,
            top,
            value,
        } = panel;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d((1.0f64..10_000.0f64).log_scale(), 0.0..top)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc("P, runs at once")
            .y_desc(unit)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(|e| fail(&e))?;
        for (steps, colour) in scale::STEPS.iter().zip(colours) {
            let line: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.steps == *steps)
                .map(|p| (p.runs as f64, value(p)))
                .collect();
            chart
                .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
                .map_err(|e| fail(&e))?
                .label(format!("S = {steps} steps per run"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
            chart
                .draw_series(
                    line.into_iter()
                        .map(|xy| Circle::new(xy, 3, colour.filled())),
                )
                .map_err(|e| fail(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
