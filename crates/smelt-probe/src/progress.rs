//! A progress line on stderr (indicatif), drawn only when stderr is a terminal, for
//! the long-running commands (`smelt probe`, `smelt bench`).

use std::io::IsTerminal;

/// Progress over a known number of steps, with the current step's name and an ETA.
pub struct Progress(indicatif::ProgressBar);

impl Progress {
    /// A progress bar of `len` steps; hidden when `enabled` is false or stderr is not a
    /// terminal. `unit` names the steps (e.g. "pairs", "figures").
    pub fn new(enabled: bool, len: u64, unit: &str) -> Progress {
        if !enabled || !std::io::stderr().is_terminal() {
            return Progress(indicatif::ProgressBar::hidden());
        }
        let bar = indicatif::ProgressBar::new(len);
        let template =
            format!("{{bar:30}} {{pos}}/{{len}} {unit}, {{elapsed}} elapsed, ETA {{eta}} {{msg}}");
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        Progress(bar)
    }

    /// Names the step now running.
    pub fn step(&self, what: impl Into<String>) {
        self.0.set_message(what.into());
    }

    /// One step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    /// Adds `n` steps to the total.
    pub fn add(&self, n: u64) {
        self.0.inc_length(n);
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}
