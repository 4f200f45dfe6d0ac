//! Progress of the long-running commands (`smelt probe`, `smelt bench`, `smelt
//! evaluate --scaling`) on stderr: an indicatif bar with an ETA when stderr is a
//! terminal; otherwise (a log file, CI) one plain line every
//! [`LINE_INTERVAL`] (`SMELT_PROGRESS_SECS` to change) with the same figures, so
//! that a long run is never silent.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the plain progress line is printed when stderr is not a terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(10);

/// Progress over a known number of steps, with the current step's name and an ETA.
pub struct Progress {
    bar: indicatif::ProgressBar,
    lines: Option<Mutex<Lines>>,
    label: String,
}

struct Lines {
    start: Instant,
    last: Instant,
    every: Duration,
    pos: u64,
    len: u64,
    unit: String,
    msg: String,
}

impl Lines {
    fn maybe_print(&mut self, label: &str) {
        let now = Instant::now();
        if now.duration_since(self.last) < self.every {
            return;
        }
        self.last = now;
        let el = now.duration_since(self.start).as_secs_f64();
        let eta = if self.pos > 0 && self.len > self.pos {
            format!(
                ", ETA {:.0} s",
                el / self.pos as f64 * (self.len - self.pos) as f64
            )
        } else {
            String::new()
        };
        eprintln!(
            "{label}: {}/{} {}, {el:.0} s elapsed{eta}{}",
            self.pos,
            self.len,
            self.unit,
            if self.msg.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.msg)
            }
        );
    }
}

fn interval() -> Duration {
    // A garbage value falls back to the default: progress lines never stop a run.
    smelt_settings::seconds(smelt_settings::PROGRESS_SECS)
        .ok()
        .flatten()
        .map(Duration::from_secs_f64)
        .unwrap_or(LINE_INTERVAL)
}

impl Progress {
    /// A progress display of `len` steps; nothing at all when `enabled` is false.
    /// `unit` names the steps (e.g. "pairs", "figures").
    pub fn new(enabled: bool, len: u64, unit: &str) -> Progress {
        let hidden = Progress {
            bar: indicatif::ProgressBar::hidden(),
            lines: None,
            label: "smelt".into(),
        };
        if !enabled {
            return hidden;
        }
        if !std::io::stderr().is_terminal() {
            let now = Instant::now();
            return Progress {
                lines: Some(Mutex::new(Lines {
                    start: now,
                    last: now,
                    every: interval(),
                    pos: 0,
                    len,
                    unit: unit.into(),
                    msg: String::new(),
                })),
                ..hidden
            };
        }
        let bar = indicatif::ProgressBar::new(len);
        let template =
            format!("{{bar:30}} {{pos}}/{{len}} {unit}, {{elapsed}} elapsed, ETA {{eta}} {{msg}}");
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        Progress {
            bar,
            lines: None,
            label: "smelt".into(),
        }
    }

    /// Names the command in the plain progress lines (default "smelt").
    pub fn with_label(mut self, label: &str) -> Progress {
        self.label = label.into();
        self
    }

    fn lines(&self, f: impl FnOnce(&mut Lines)) {
        if let Some(l) = &self.lines {
            if let Ok(mut l) = l.lock() {
                f(&mut l);
                l.maybe_print(&self.label);
            }
        }
    }

    /// Names the step now running.
    pub fn step(&self, what: impl Into<String>) {
        let what = what.into();
        self.lines(|l| l.msg = what.clone());
        self.bar.set_message(what);
    }

    /// One step done.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// `n` steps done.
    pub fn inc_by(&self, n: u64) {
        self.lines(|l| l.pos += n);
        self.bar.inc(n);
    }

    /// Adds `n` steps to the total.
    pub fn add(&self, n: u64) {
        self.lines(|l| l.len += n);
        self.bar.inc_length(n);
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
