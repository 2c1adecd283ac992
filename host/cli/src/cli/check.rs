//! `weft check FILE [--plugins DIR]`: a workflow file checked without
//! running it; with `--plugins`, each step's plugin too.

use std::path::Path;
use std::process::ExitCode;

use weft::model;
use weft::plugins::PluginDir;

use super::EXIT_INVALID;

/// Checks the workflow in `file`: its shape, expressions and references;
/// with `plugins`, that every `uses:` finds a plugin in that folder whose
/// version satisfies it, and that each step's grants, `args` and `env` fit
/// its plugin (a plugin that makes HTTP requests needs a grant; `args` and
/// `env` are for commands), and that a `with` of no expression fits the
/// plugin's input schema, as a run's start would check them for tenant
/// `default` on a host without an egress policy.
pub fn check(data_dir: &Path, file: &Path, plugins: Option<&Path>) -> anyhow::Result<ExitCode> {
    let workflow = match model::load(file) {
        Ok(workflow) => workflow,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let steps = workflow.steps.len();
    let mut checked = Vec::new();
    if let Some(dir) = plugins {
        if !dir.is_dir() {
            eprintln!("error: --plugins {}: no such folder", dir.display());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
        let found = PluginDir::new(super::local_runtime(data_dir)?, dir.to_owned());
        let mut problems = Vec::new();
        for step in workflow.all_steps() {
            let Some(call) = step.call() else { continue };
            let at = match step.line {
                Some(line) => format!("{}:{line}: ", file.display()),
                None => String::new(),
            };
            let checked_step = found
                .resolve(&call.uses)
                .map_err(|e| e.to_string())
                .and_then(|plugin| {
                    weft::engine::check_reach(
                        &plugin,
                        call,
                        &weft::core::egress::Policy::Unbounded,
                    )?;
                    // A `with` of no expression is known now: it must fit
                    // the plugin's input schema.
                    if let Some(input) = call.with.literal()
                        && let Err(problems) = plugin.check_input(input)
                    {
                        return Err(format!(
                            "`with` does not fit the input schema of plugin `{}`: {}",
                            plugin.meta().name,
                            problems.join("; ")
                        ));
                    }
                    Ok(format!("{}@{}", plugin.meta().name, plugin.meta().version))
                });
            match checked_step {
                Ok(plugin) => checked.push(format!("{} ({plugin})", step.id)),
                Err(message) => problems.push(format!("{at}step `{}`: {message}", step.id)),
            }
        }
        if !problems.is_empty() {
            for problem in &problems {
                eprintln!("error: {problem}");
            }
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    }
    out!(
        "{}: workflow `{}` version {} is valid ({} step{})",
        file.display(),
        workflow.id,
        workflow.version,
        steps,
        if steps == 1 { "" } else { "s" }
    );
    if plugins.is_some() {
        out!(
            "plugins: {}",
            if checked.is_empty() {
                "no step uses one".to_owned()
            } else {
                checked.join(", ")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
