//! What every subcommand shares: range-checked option parsers (clap names the
//! option in the error), output-path checks made before any work starts, printing
//! with control characters escaped, and the exit statuses.

use anyhow::Result;
use std::io::Write as _;
use std::path::Path;

/// Exit status of a run that did its work and printed its results, but some of
/// what was asked for failed (e.g. a `smelt bench` figure).
pub const EXIT_INCOMPLETE: i32 = 1;
/// Exit status of every error (usage, input, output): nothing was written.
pub const EXIT_ERROR: i32 = 2;

/// The longest any time limit or timeout may be, seconds (one week).
pub const MAX_SECONDS: f64 = 7.0 * 86400.0;

/// The error of a run that printed its results but could not obtain all of them:
/// `error: MSG`, exit status [`EXIT_INCOMPLETE`].
#[derive(Debug)]
pub struct Incomplete(pub String);

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Incomplete {}

/// A number of seconds, `0 < s <= MAX_SECONDS` (`--timeout`, `--time-limit`).
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| "not a number of seconds".to_string())?;
    if !(v.is_finite() && v > 0.0 && v <= MAX_SECONDS) {
        return Err(format!(
            "must be more than 0 and at most {MAX_SECONDS} seconds (one week)"
        ));
    }
    Ok(v)
}

/// A parser of whole numbers in `min..=max` for clap.
pub fn count(
    min: usize,
    max: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: usize = s
            .trim()
            .parse()
            .map_err(|_| format!("not a whole number (expected {min} to {max})"))?;
        if !(min..=max).contains(&v) {
            return Err(format!("must be between {min} and {max}"));
        }
        Ok(v)
    }
}

/// A parser of `u32` in `min..=max` for clap.
pub fn count_u32(
    min: u32,
    max: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    let c = count(min as usize, max as usize);
    move |s: &str| c(s).map(|v| v as u32)
}

/// A parser of finite numbers in `min..=max` for clap.
pub fn number(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s.trim().parse().map_err(|_| "not a number".to_string())?;
        if !(v.is_finite() && v >= min && v <= max) {
            return Err(format!("must be between {min} and {max}"));
        }
        Ok(v)
    }
}

/// Checks an output path before the work starts (see [`smelt_model::files`]):
/// its directory exists and is writable, it is not a FIFO/device/directory, and it
/// is none of `inputs`. `option` is the option as the user types it (`-o`, ...).
pub fn check_output(option: &str, path: &Path, inputs: &[&Path]) -> Result<()> {
    smelt_model::files::check_output(path, inputs)
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("option {option}: {e}"))
}

/// Writes text to stdout with control characters escaped (newlines kept); a
/// closed stdout (`| head`) is not an error.
pub fn print_text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(smelt_model::text::escape_text(text).as_bytes());
}

/// One `warning: ...` line on stderr, escaped.
pub fn warn(msg: &str) {
    eprintln!("warning: {}", smelt_model::text::escape_line(msg));
}

/// Prints `error: MSG` (one line, escaped) and exits with [`EXIT_ERROR`].
pub fn fail(msg: &str) -> ! {
    let one = msg.replace('\n', " ");
    eprintln!("error: {}", smelt_model::text::escape_line(&one));
    std::process::exit(EXIT_ERROR);
}

/// A clap usage error as one line: `error: WHAT (tip: ...); try 'smelt CMD --help'`.
/// `typed` is the subcommand the user typed (`smelt tree`), used when the message
/// has no usage line.
pub fn usage_line(rendered: &str, typed: &str) -> String {
    let mut what = String::new();
    let mut tips = Vec::new();
    let mut cmd = typed.to_string();
    let mut in_error = false;
    for line in rendered.lines() {
        let t = line.trim();
        if t.is_empty() {
            in_error = false;
            continue;
        }
        if let Some(rest) = t.strip_prefix("error:") {
            what = rest.trim().to_string();
            in_error = true;
        } else if in_error {
            // Continuation of the message (e.g. the missing arguments).
            what = format!("{} {t}", what.trim_end_matches(':'));
        } else if let Some(rest) = t.strip_prefix("tip:") {
            tips.push(rest.trim().to_string());
        } else if let Some(rest) = t.strip_prefix("Usage:") {
            // "smelt model show [OPTIONS] <MODEL>" -> "smelt model show"
            let words: Vec<&str> = rest
                .split_whitespace()
                .take_while(|w| !w.starts_with(['-', '<', '[']))
                .filter(|w| !w.contains('|'))
                .collect();
            if !words.is_empty() {
                cmd = words.join(" ");
            }
        } else if what.is_empty() && !t.is_empty() {
            what = t.to_string();
        }
    }
    let mut s = what;
    if !tips.is_empty() {
        s.push_str(&format!(" ({})", tips.join("; ")));
    }
    s.push_str(&format!("; try '{cmd} --help'"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_bound_their_values() {
        assert_eq!(seconds("1.5"), Ok(1.5));
        for bad in ["0", "-1", "1e20", "nan", "inf", "x"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        let c = count(1, 10);
        assert_eq!(c("10"), Ok(10));
        assert!(c("0").is_err() && c("11").is_err() && c("-1").is_err());
        let n = number(0.0, 2.0);
        assert!(n("2.5").is_err() && n("NaN").is_err());
    }

    #[test]
    fn usage_errors_become_one_line() {
        let r = "error: unexpected argument '--modle' found\n\n  tip: a similar argument \
                 exists: '--model'\n\nUsage: smelt tree --model <MODEL>\n\nFor more \
                 information, try '--help'.\n";
        assert_eq!(
            usage_line(r, "smelt"),
            "unexpected argument '--modle' found (a similar argument exists: '--model'); \
             try 'smelt tree --help'"
        );
    }
}
