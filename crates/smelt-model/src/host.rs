//! Small facts about the machine and the clock that provenance records need,
//! without extra dependencies: the current date in RFC 3339, the host name, the
//! CPU model string from `/proc/cpuinfo`, and where this host's probed model is cached.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The current UTC time as RFC 3339 (`2026-11-22T02:16:54Z`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_from_unix(secs)
}

/// Formats seconds since the Unix epoch as an RFC 3339 UTC time.
pub fn rfc3339_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// well-known days-to-civil algorithm, reimplemented).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// This machine's host name (`/proc/sys/kernel/hostname`, then `/etc/hostname`,
/// then `$HOSTNAME`), or `unknown`.
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// Where this host's probed model is cached: `smelt probe --cache` writes it there and
/// `libsmelt_mpi` (smelt-mpi) reads it. `$XDG_CACHE_HOME/smelt/model-<host>.json`, else
/// `$HOME/.cache/smelt/model-<host>.json`; `None` when neither variable gives an
/// absolute directory.
pub fn cached_model_path() -> Option<PathBuf> {
    cached_model_path_in(
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
        &host_name(),
    )
}

/// [`cached_model_path`] for given `XDG_CACHE_HOME`, `HOME` and host name. Characters
/// of the host name other than letters, digits, `.`, `-` and `_` become `_`.
pub fn cached_model_path_in(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
    host: &str,
) -> Option<PathBuf> {
    cache_file_in(xdg_cache_home, home, "model", host)
}

/// Where a host's tuning file is cached: `smelt tune` writes it there and every tree
/// asked for as `auto` reads it. `$XDG_CACHE_HOME/smelt/tune-<host>.json`, else
/// `$HOME/.cache/smelt/tune-<host>.json` (the directory of [`cached_model_path`]);
/// `None` when neither variable gives an absolute directory.
pub fn cached_tune_path(host: &str) -> Option<PathBuf> {
    cached_tune_path_in(
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
        host,
    )
}

/// [`cached_tune_path`] for given `XDG_CACHE_HOME` and `HOME`; the host name is
/// sanitized as in [`cached_model_path_in`].
pub fn cached_tune_path_in(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
    host: &str,
) -> Option<PathBuf> {
    cache_file_in(xdg_cache_home, home, "tune", host)
}

/// `<cache dir>/smelt/<kind>-<sanitized host>.json`.
fn cache_file_in(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
    kind: &str,
    host: &str,
) -> Option<PathBuf> {
    let abs = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    let base = abs(xdg_cache_home).or_else(|| abs(home).map(|h| h.join(".cache")))?;
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = if host.is_empty() || host.starts_with('.') {
        format!("_{host}")
    } else {
        host
    };
    Some(base.join("smelt").join(format!("{kind}-{host}.json")))
}

/// The first `model name` (x86) / `cpu model` / `Processor` line of `/proc/cpuinfo`,
/// if any.
pub fn cpu_model_from_proc() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    for key in ["model name", "cpu model", "Processor", "cpu"] {
        for line in text.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim() == key && !v.trim().is_empty() {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_model_path_prefers_xdg_then_home() {
        let p = |x: Option<&str>, h: Option<&str>, host: &str| {
            cached_model_path_in(x.map(Into::into), h.map(Into::into), host)
        };
        assert_eq!(
            p(Some("/c"), Some("/h"), "n1"),
            Some(PathBuf::from("/c/smelt/model-n1.json"))
        );
        assert_eq!(
            p(Some("rel"), Some("/h"), "n1"),
            Some(PathBuf::from("/h/.cache/smelt/model-n1.json"))
        );
        assert_eq!(
            p(None, Some("/h"), "a/b ..c"),
            Some(PathBuf::from("/h/.cache/smelt/model-a_b_..c.json"))
        );
        assert_eq!(p(None, None, "x"), None);
        assert_eq!(
            cached_tune_path_in(Some("/c".into()), None, "n 1"),
            Some(PathBuf::from("/c/smelt/tune-n_1.json"))
        );
        assert_eq!(
            p(Some("/c"), None, ".."),
            Some(PathBuf::from("/c/smelt/model-_...json"))
        );
    }

    #[test]
    fn formats_known_dates() {
        assert_eq!(rfc3339_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_from_unix(1_700_000_000), "2023-11-14T22:13:20Z");
        assert!(now_rfc3339().starts_with("20"));
        assert!(!host_name().is_empty());
    }
}
