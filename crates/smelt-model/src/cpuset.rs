//! CPU list syntax as used by Linux (`0-7,12,14-15`), hwloc and taskset.

use crate::ModelError;

/// The most CPUs one range of a CPU list may span (guards against `0-4294967295`).
pub const MAX_RANGE: u32 = 1 << 16;

/// Parses a CPU list such as `0-7,12` into a sorted list of unique CPU ids.
///
/// An empty string, a reversed range (`7-3`), a range of more than [`MAX_RANGE`]
/// CPUs, or a non-number is an error.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, ModelError> {
    let bad = |why: String| ModelError::CpuList {
        input: s.to_string(),
        why,
    };
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad("empty element".into()));
        }
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| bad(format!("'{t}' is not a CPU number")))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad(format!("range {a}-{b} is reversed")));
                }
                if b - a >= MAX_RANGE {
                    return Err(bad(format!(
                        "range {a}-{b} is too large (at most {MAX_RANGE} CPUs per range)"
                    )));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Formats CPU ids compactly (`0-7,12`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-3,7,5").unwrap(), vec![0, 1, 2, 3, 5, 7]);
        assert_eq!(parse_cpu_list(" 2 , 2-3").unwrap(), vec![2, 3]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("1,,2").is_err());
        assert!(parse_cpu_list("0-4294967295").is_err());
        assert_eq!(parse_cpu_list("0-65535").unwrap().len(), 65536);
    }

    #[test]
    fn formats_round_trip() {
        let v = vec![0, 1, 2, 3, 5, 7, 8];
        assert_eq!(format_cpu_list(&v), "0-3,5,7-8");
        assert_eq!(parse_cpu_list(&format_cpu_list(&v)).unwrap(), v);
    }
}
