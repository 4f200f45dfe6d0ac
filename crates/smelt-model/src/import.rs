//! Importers for other tools' measurements.
//!
//! * **Smelt machine database** ([`Format::MachineDb`]): a directory with
//!   `pairwise-nsend_send`, `pairwise-nsend_receive` and optionally
//!   `pairwise-nsend_rtt`, each a line `SRC DST MEAN STDERR` per ordered CPU pair, in
//!   cycles. Cycles become ns with the clock of `lscpu.txt` (`CPU MHz`) or the
//!   caller's `ghz` (which wins). The hierarchy comes from `lscpu.txt` (NUMA node CPU
//!   lists) and `likwid.txt` (sockets, cache groups, cores).
//! * **core-to-core-latency CSV** ([`Format::C2cCsv`]): an `n×n` lower-triangular
//!   matrix of one-way latencies in ns (row `i`, column `j < i`), first row empty,
//!   empty cells not measured. One number per unordered pair becomes `send` and
//!   `receive` by the rule documented at [`C2C_RECEIVE_PER_SEND`].
//!
//! Every import infers a hierarchy from the costs ([`crate::infer`]), fills missing
//! pairs from it ([`fill_gaps`]) and records what it did in the provenance. Bad
//! input is a [`ModelError::Parse`] naming the file, the line and the problem.

// Cost matrices are indexed by position pairs; index loops read best here.
#![allow(clippy::needless_range_loop)]

use crate::host::now_rfc3339;
use crate::infer::{infer_from_costs, infer_hierarchy, symmetric_cost};
use crate::stats::median;
use crate::{format_cpu_list, parse_cpu_list, Hierarchy, Level, Model, ModelError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `receive / send` used to split a one-way latency (core-to-core-latency imports).
///
/// Derived from the Smelt machine database's Intel Xeon E5 v2 (2×10 cores), where
/// both were measured: the median of `receive/send` over all 380 ordered pairs is
/// 3.56, and it is the same within a socket (3.56) and across sockets (3.54). So the
/// receiver's share of a message's cost does not depend on the distance.
pub const C2C_RECEIVE_PER_SEND: f64 = 3.56;

/// `(send + receive) / (rtt / 2)` used to scale a one-way latency (core-to-core-latency
/// imports): on the same Xeon the median is 0.88 (0.88 within and across sockets).
/// A core-to-core-latency "one-way latency" is half a ping-pong round trip, so
/// `send + receive = 0.88 × latency`, i.e.
/// `send = 0.88 × L / (1 + 3.56)` and `receive = 0.88 × L × 3.56 / (1 + 3.56)`.
pub const C2C_COST_PER_ONE_WAY: f64 = 0.88;

/// Slowest clock rate accepted to turn cycles into ns, GHz (`--ghz`, `CPU MHz`).
pub const MIN_GHZ: f64 = 0.01;
/// Fastest clock rate accepted, GHz.
pub const MAX_GHZ: f64 = 100.0;

/// The most CPUs an import accepts (the cost matrices grow with the square).
pub const MAX_CPUS: usize = 8192;

/// The input formats [`import`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A Smelt machine database directory (`pairwise-nsend_send`, ...).
    MachineDb,
    /// A core-to-core-latency lower-triangular CSV matrix.
    C2cCsv,
}

impl Format {
    /// The name used on the command line and in provenance (`smelt-machinedb`,
    /// `c2c-csv`).
    pub fn name(self) -> &'static str {
        match self {
            Format::MachineDb => "smelt-machinedb",
            Format::C2cCsv => "c2c-csv",
        }
    }

    /// Parses a command-line format name.
    pub fn from_name(s: &str) -> Option<Format> {
        match s {
            "smelt-machinedb" | "machinedb" => Some(Format::MachineDb),
            "c2c-csv" | "csv" | "core-to-core-latency" => Some(Format::C2cCsv),
            _ => None,
        }
    }
}

/// Options of [`import`].
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Input format; detected from the path when `None` (see [`detect_format`]).
    pub format: Option<Format>,
    /// Clock rate in GHz for cycle counts; wins over the source's own.
    pub ghz: Option<f64>,
}

/// Detects the format: a directory with `pairwise-nsend_send` is a machine
/// database, a file ending in `.csv` a core-to-core-latency matrix.
pub fn detect_format(path: &Path) -> Result<Format, ModelError> {
    if path.is_dir() {
        if path.join("pairwise-nsend_send").is_file() {
            return Ok(Format::MachineDb);
        }
        return Err(ModelError::Other(format!(
            "{}: a directory without pairwise-nsend_send is not a Smelt machine database",
            path.display()
        )));
    }
    if !path.exists() {
        return Err(ModelError::Io {
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("csv") => Ok(Format::C2cCsv),
        _ => Err(ModelError::Other(format!(
            "{}: cannot tell the format (expected a machine database directory or a .csv \
             file); pass --format smelt-machinedb or --format c2c-csv",
            path.display()
        ))),
    }
}

/// Imports `path` in the given or detected format into a validated model with an
/// inferred hierarchy.
pub fn import(path: &Path, opts: &ImportOptions) -> Result<Model, ModelError> {
    let format = match opts.format {
        Some(f) => f,
        None => detect_format(path)?,
    };
    if path.exists() && path.is_dir() != (format == Format::MachineDb) {
        return Err(ModelError::Other(format!(
            "{}: a {} input is {}",
            path.display(),
            format.name(),
            if format == Format::MachineDb {
                "a directory (with pairwise-nsend_send, pairwise-nsend_receive, ...)"
            } else {
                "a .csv file, not a directory"
            }
        )));
    }
    let model = match format {
        Format::MachineDb => import_machinedb(path, opts.ghz)?,
        Format::C2cCsv => import_c2c_csv(path)?,
    };
    model.validate().map_err(|e| e.at(path))?;
    Ok(model)
}

fn read_text(path: &Path) -> Result<String, ModelError> {
    crate::files::read_input_text(path)
}

/// Parses one measured cost. `Ok(None)` for 0: no message between two CPUs is
/// free, so a 0 is a measurement that did not happen (the caller fills it like a
/// missing one and says so). Non-numbers, NaN, infinities, negative values and
/// values above `max` are errors.
fn cost_cell(
    path: &Path,
    line: usize,
    what: &str,
    text: &str,
    max: f64,
) -> Result<Option<f64>, ModelError> {
    let shown = crate::text::escape_line(text.trim()).into_owned();
    let v: f64 = text.trim().parse().map_err(|_| {
        ModelError::parse(
            path,
            Some(line),
            format!("{what} '{shown}' is not a number"),
        )
    })?;
    if v.is_nan() || v.is_infinite() {
        return Err(ModelError::parse(
            path,
            Some(line),
            format!("{what} is {v}: costs must be finite"),
        ));
    }
    if v < 0.0 {
        return Err(ModelError::parse(
            path,
            Some(line),
            format!("{what} {v} is negative"),
        ));
    }
    if v > max {
        return Err(ModelError::parse(
            path,
            Some(line),
            format!("{what} {v:e} is out of range: at most {max:e} is accepted"),
        ));
    }
    Ok((v > 0.0).then_some(v))
}

/// At most this many cells are named in a provenance note (then "and N more").
const CELLS_NAMED: usize = 20;

fn name_cells(cells: &[String]) -> String {
    let mut s = cells
        .iter()
        .take(CELLS_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if cells.len() > CELLS_NAMED {
        s.push_str(&format!(" and {} more", cells.len() - CELLS_NAMED));
    }
    s
}

// ---------------------------------------------------------------------------
// core-to-core-latency CSV
// ---------------------------------------------------------------------------

/// Reads a core-to-core-latency CSV: `n` lines of `n` comma-separated cells, cell
/// `(i, j)` with `j < i` the one-way latency between CPUs `i` and `j` in ns, empty
/// when not measured. A value above the diagonal is accepted when its mirror cell is
/// empty (and is a duplicate otherwise). Returns the symmetric matrix (NaN = not
/// measured, 0 on the diagonal). A cell holding 0 is treated as not measured; see
/// [`read_c2c_matrix_cells`] for which cells those were.
pub fn read_c2c_matrix(path: &Path) -> Result<Vec<Vec<f64>>, ModelError> {
    read_c2c_matrix_cells(path).map(|(m, _)| m)
}

/// A cell of a latency matrix: (line, column) 1-based, and the two CPUs.
pub type Cell = (usize, usize, usize, usize);

/// [`read_c2c_matrix`], also returning the cells that held 0.
pub fn read_c2c_matrix_cells(path: &Path) -> Result<(Vec<Vec<f64>>, Vec<Cell>), ModelError> {
    let text = read_text(path)?;
    if text.trim().is_empty() {
        return Err(ModelError::parse(path, None, "the file is empty"));
    }
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let lines: Vec<&str> = lines.iter().map(|l| l.trim_end_matches('\r')).collect();
    let n = lines.len();
    if n > MAX_CPUS {
        return Err(ModelError::parse(
            path,
            Some(MAX_CPUS + 1),
            format!("{n} rows: at most {MAX_CPUS} CPUs are supported"),
        ));
    }
    if n < 2 {
        return Err(ModelError::parse(
            path,
            Some(1),
            "a latency matrix needs at least 2 rows (one per CPU)",
        ));
    }
    let mut m = vec![vec![f64::NAN; n]; n];
    let mut zeros = Vec::new();
    // Where each unordered pair was given: (line, column), both 1-based.
    let mut at: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let ln = i + 1;
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != n {
            let why = if line.trim().is_empty() {
                format!("empty line: expected {n} comma-separated cells (one per CPU)")
            } else {
                format!(
                    "{} cells, expected {n}: the matrix must be square with one row and one \
                     column per CPU, and the file has {n} rows",
                    cells.len()
                )
            };
            return Err(ModelError::parse(path, Some(ln), why));
        }
        m[i][i] = 0.0;
        for (j, cell) in cells.iter().enumerate() {
            if cell.trim().is_empty() {
                continue;
            }
            let what = format!("column {} (CPU {i} <-> CPU {j}): latency", j + 1);
            if i == j {
                return Err(ModelError::parse(
                    path,
                    Some(ln),
                    format!(
                        "column {}: the diagonal (CPU {i} to itself) must be empty",
                        j + 1
                    ),
                ));
            }
            let v = cost_cell(path, ln, &what, cell, crate::MAX_COST_NS)?;
            let key = (i.min(j), i.max(j));
            if let Some((pl, pc)) = at.get(&key) {
                return Err(ModelError::parse(
                    path,
                    Some(ln),
                    format!(
                        "column {}: duplicate pair CPU {} <-> CPU {} (already given at line \
                         {pl}, column {pc})",
                        j + 1,
                        key.0,
                        key.1
                    ),
                ));
            }
            at.insert(key, (ln, j + 1));
            match v {
                Some(v) => {
                    m[i][j] = v;
                    m[j][i] = v;
                }
                None => zeros.push((ln, j + 1, i, j)),
            }
        }
    }
    if at.len() == zeros.len() && !zeros.is_empty() {
        return Err(ModelError::parse(
            path,
            None,
            "every latency in the matrix is 0: nothing was measured",
        ));
    }
    if at.is_empty() {
        return Err(ModelError::parse(
            path,
            None,
            "no latency in the matrix: every cell is empty",
        ));
    }
    Ok((m, zeros))
}

/// Imports a core-to-core-latency CSV (see the module docs and
/// [`C2C_RECEIVE_PER_SEND`]). CPUs are numbered 0..n in row order; host and CPU
/// model come from the file name; unmeasured pairs are filled by [`fill_gaps`].
pub fn import_c2c_csv(path: &Path) -> Result<Model, ModelError> {
    let (mut lat, zeros) = read_c2c_matrix_cells(path)?;
    let n = lat.len();
    let cpus: Vec<u32> = (0..n as u32).collect();
    let missing = count_missing(&lat);
    let zero_pair =
        |i: usize, j: usize| zeros.iter().any(|z| (z.2.max(z.3), z.2.min(z.3)) == (i, j));
    let empty_pairs: Vec<String> = (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter(|&(i, j)| !lat[i][j].is_finite() && !zero_pair(i, j))
        .map(|(i, j)| format!("CPU {i} <-> CPU {j}"))
        .collect();
    let classes = infer_from_costs(&cpus, &lat);
    let filled = fill_gaps(&mut lat, &cpus, &classes).map_err(|e| in_file(e, path))? / 2;
    let r = C2C_RECEIVE_PER_SEND;
    let f = C2C_COST_PER_ONE_WAY;
    let scale = |k: f64| -> Vec<Vec<f64>> {
        lat.iter()
            .map(|row| row.iter().map(|&v| v * k).collect())
            .collect()
    };
    let send = scale(f / (1.0 + r));
    let receive = scale(f * r / (1.0 + r));
    let mut model = Model::new(cpus, send, receive);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().trim().to_string())
        .unwrap_or_default();
    let p = &mut model.provenance;
    p.host = stem.clone();
    p.cpu_model = stem
        .strip_prefix("Dual ")
        .map(str::to_string)
        .unwrap_or(stem);
    p.date = now_rfc3339();
    p.method = "import:core-to-core-latency".into();
    p.source = Some(path.display().to_string());
    p.derivation = Some(format!(
        "one one-way latency L per unordered pair (half a cache-line ping-pong); \
         send = {f} * L / (1 + {r}), receive = {f} * L * {r} / (1 + {r}), the same in both \
         directions. {r} is the median receive/send and {f} the median \
         (send + receive) / (rtt / 2) of the Smelt machine database's Xeon E5 v2 2x10, \
         where all three were measured (both ratios are the same within and across sockets)"
    ));
    p.notes.push(format!(
        "{} of {} CPU pairs measured; {filled} filled with the median of measured pairs \
         between the same inferred groups",
        n * (n - 1) / 2 - missing,
        n * (n - 1) / 2
    ));
    if !zeros.is_empty() {
        let cells: Vec<String> = zeros
            .iter()
            .map(|&(l, c, i, j)| format!("line {l} column {c} (CPU {i} <-> CPU {j})"))
            .collect();
        p.notes.push(format!(
            "warning: {} cell{} held 0, which is not a possible latency: treated as not \
             measured and filled: {}",
            zeros.len(),
            if zeros.len() == 1 { "" } else { "s" },
            name_cells(&cells)
        ));
    }
    if !empty_pairs.is_empty() {
        p.notes.push(format!(
            "warning: {} CPU pair{} not measured (empty cells), filled: {}",
            empty_pairs.len(),
            if empty_pairs.len() == 1 {
                " was"
            } else {
                "s were"
            },
            name_cells(&empty_pairs)
        ));
    }
    model.hierarchy = Hierarchy {
        source: "none".into(),
        levels: vec![],
    };
    model.inferred_hierarchy = Some(infer_hierarchy(&model));
    Ok(model)
}

fn count_missing(m: &[Vec<f64>]) -> usize {
    let n = m.len();
    (0..n)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .filter(|&(i, j)| !m[i][j].is_finite())
        .count()
}

/// Replaces every NaN off the diagonal of `m` (positions in `cpus` order) with the
/// median of the measured entries in the same *group-pair class* of `hierarchy`:
/// pairs that first part at the same level, between the same two groups of that
/// level (in the same direction), or that share the innermost group. Falls back to
/// all measured pairs that part at that level, then to all measured pairs. Never
/// writes zeros. Returns how many entries were filled; errors when a CPU has no
/// measurement at all in `m` (it could be anywhere).
///
/// The error is [`ModelError::Invalid`] without a path ([`ModelError::at`] names the
/// file).
pub fn fill_gaps(
    m: &mut [Vec<f64>],
    cpus: &[u32],
    hierarchy: &Hierarchy,
) -> Result<usize, ModelError> {
    fill_gaps_why(m, cpus, hierarchy).map_err(|why| ModelError::Invalid { path: None, why })
}

/// `fill_gaps`'s error as a parse error of the file its costs came from.
fn in_file(e: ModelError, path: &Path) -> ModelError {
    match e {
        ModelError::Invalid { why, .. } => ModelError::parse(path, None, why),
        e => e,
    }
}

fn fill_gaps_why(m: &mut [Vec<f64>], cpus: &[u32], hierarchy: &Hierarchy) -> Result<usize, String> {
    let n = m.len();
    let mut todo = Vec::new();
    for i in 0..n {
        for j in 0..n {
            if i != j && !m[i][j].is_finite() {
                todo.push((i, j));
            }
        }
    }
    if todo.is_empty() {
        return Ok(0);
    }
    for i in 0..n {
        if (0..n).all(|j| j == i || (!m[i][j].is_finite() && !m[j][i].is_finite())) {
            return Err(format!(
                "CPU {} has no measured pair: cannot fill its costs",
                cpus[i]
            ));
        }
    }
    let gid: Vec<Vec<usize>> = hierarchy
        .levels
        .iter()
        .map(|l| {
            let mut ids = vec![usize::MAX; n];
            for (g, members) in l.groups.iter().enumerate() {
                for c in members {
                    if let Some(p) = cpus.iter().position(|x| x == c) {
                        ids[p] = g;
                    }
                }
            }
            ids
        })
        .collect();
    let nl = gid.len();
    // (level where they part, or nl if never; group of i there; group of j there).
    let class = |i: usize, j: usize| -> (usize, usize, usize) {
        match (0..nl).find(|&k| gid[k][i] != gid[k][j]) {
            Some(k) => (k, gid[k][i], gid[k][j]),
            None => (
                nl,
                gid.last().map_or(0, |g| g[i]),
                gid.last().map_or(0, |g| g[j]),
            ),
        }
    };
    let mut fine: HashMap<(usize, usize, usize), Vec<f64>> = HashMap::new();
    let mut coarse: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut all = Vec::new();
    for i in 0..n {
        for j in 0..n {
            if i != j && m[i][j].is_finite() {
                let c = class(i, j);
                fine.entry(c).or_default().push(m[i][j]);
                coarse.entry(c.0).or_default().push(m[i][j]);
                all.push(m[i][j]);
            }
        }
    }
    let mut fine_med: HashMap<(usize, usize, usize), f64> =
        fine.iter_mut().map(|(k, v)| (*k, median(v))).collect();
    let coarse_med: HashMap<usize, f64> = coarse.iter_mut().map(|(k, v)| (*k, median(v))).collect();
    let all_med = median(&mut all);
    for &(i, j) in &todo {
        let c = class(i, j);
        let v = *fine_med
            .entry(c)
            .or_insert_with(|| coarse_med.get(&c.0).copied().unwrap_or(all_med));
        if v.is_nan() || v <= 0.0 {
            return Err(format!(
                "cannot fill CPU {} -> CPU {}: no positive measured cost to take it from",
                cpus[i], cpus[j]
            ));
        }
        m[i][j] = v;
    }
    Ok(todo.len())
}

// ---------------------------------------------------------------------------
// Smelt machine database
// ---------------------------------------------------------------------------

/// One parsed `pairwise-nsend_*` file: mean cost per ordered pair, in cycles.
struct PairFile {
    path: PathBuf,
    pairs: HashMap<(u32, u32), (f64, usize)>,
    /// Pairs whose MEAN was 0 (not measured): (src, dst, line).
    zeros: Vec<(u32, u32, usize)>,
}

fn read_pair_file(path: &Path) -> Result<PairFile, ModelError> {
    let text = read_text(path)?;
    if text.trim().is_empty() {
        return Err(ModelError::parse(path, None, "the file is empty"));
    }
    let mut pairs: HashMap<(u32, u32), (f64, usize)> = HashMap::new();
    let mut zeros: Vec<(u32, u32, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() != 4 {
            return Err(ModelError::parse(
                path,
                Some(ln),
                format!("{} columns, expected 4 (SRC DST MEAN STDERR)", f.len()),
            ));
        }
        let cpu = |s: &str, what: &str| -> Result<u32, ModelError> {
            s.parse().map_err(|_| {
                ModelError::parse(path, Some(ln), format!("{what} '{s}' is not a CPU number"))
            })
        };
        let (src, dst) = (cpu(f[0], "SRC")?, cpu(f[1], "DST")?);
        if src == dst {
            return Err(ModelError::parse(
                path,
                Some(ln),
                format!("CPU {src} paired with itself"),
            ));
        }
        // Cycles; the ns bound is checked after conversion.
        let mean = cost_cell(path, ln, "MEAN", f[2], f64::MAX)?;
        let se: f64 = f[3].parse().map_err(|_| {
            ModelError::parse(path, Some(ln), format!("STDERR '{}' is not a number", f[3]))
        })?;
        if !se.is_finite() || se < 0.0 {
            return Err(ModelError::parse(
                path,
                Some(ln),
                format!("STDERR is {se}: must be finite and >= 0"),
            ));
        }
        let first = pairs
            .get(&(src, dst))
            .map(|p| p.1)
            .or_else(|| zeros.iter().find(|z| (z.0, z.1) == (src, dst)).map(|z| z.2));
        if let Some(first) = first {
            return Err(ModelError::parse(
                path,
                Some(ln),
                format!("duplicate pair {src} -> {dst} (first given at line {first})"),
            ));
        }
        match mean {
            Some(mean) => {
                pairs.insert((src, dst), (mean, ln));
            }
            None => zeros.push((src, dst, ln)),
        }
    }
    if pairs.is_empty() && !zeros.is_empty() {
        return Err(ModelError::parse(
            path,
            None,
            "every MEAN in the file is 0: nothing was measured",
        ));
    }
    if pairs.is_empty() {
        return Err(ModelError::parse(path, None, "no measurement in the file"));
    }
    Ok(PairFile {
        path: path.into(),
        pairs,
        zeros,
    })
}

/// What `lscpu.txt` tells.
#[derive(Default)]
struct Lscpu {
    mhz: Option<f64>,
    online: Option<Vec<u32>>,
    numa: Vec<(u32, Vec<u32>, usize)>,
    model_name: Option<String>,
    vendor: Option<String>,
    family: Option<String>,
    model: Option<String>,
}

fn read_lscpu(path: &Path) -> Result<Lscpu, ModelError> {
    let text = read_text(path)?;
    let mut out = Lscpu::default();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        let cpus = |v: &str| {
            parse_cpu_list(v).map_err(|e| ModelError::parse(path, Some(ln), e.to_string()))
        };
        match k {
            "CPU MHz" => {
                let mhz: f64 = v.parse().map_err(|_| {
                    ModelError::parse(path, Some(ln), format!("CPU MHz '{v}' is not a number"))
                })?;
                if !(mhz.is_finite() && (MIN_GHZ * 1e3..=MAX_GHZ * 1e3).contains(&mhz)) {
                    return Err(ModelError::parse(
                        path,
                        Some(ln),
                        format!(
                            "CPU MHz is {mhz}: must be between {} and {}",
                            MIN_GHZ * 1e3,
                            MAX_GHZ * 1e3
                        ),
                    ));
                }
                out.mhz = Some(mhz);
            }
            "On-line CPU(s) list" => out.online = Some(cpus(v)?),
            "Model name" => out.model_name = Some(v.to_string()),
            "Vendor ID" => out.vendor = Some(v.to_string()),
            "CPU family" => out.family = Some(v.to_string()),
            "Model" => out.model = Some(v.to_string()),
            _ => {
                if let Some(node) = k
                    .strip_prefix("NUMA node")
                    .and_then(|r| r.strip_suffix(" CPU(s)"))
                {
                    let id: u32 = node.trim().parse().map_err(|_| {
                        ModelError::parse(path, Some(ln), format!("bad NUMA node number '{node}'"))
                    })?;
                    out.numa.push((id, cpus(v)?, ln));
                }
            }
        }
    }
    Ok(out)
}

/// What `likwid.txt` (likwid-topology output) tells.
#[derive(Default)]
struct Likwid {
    cpu_name: Option<String>,
    cpu_type: Option<String>,
    sockets: Vec<(Vec<u32>, usize)>,
    /// (cache level, groups, line)
    caches: Vec<(u32, Vec<Vec<u32>>, usize)>,
    /// (hwthread, core, socket, line)
    threads: Vec<(u32, u32, u32, usize)>,
}

fn parse_paren_groups(path: &Path, ln: usize, s: &str) -> Result<Vec<Vec<u32>>, ModelError> {
    let mut groups = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some(open) = rest.strip_prefix('(') else {
            return Err(ModelError::parse(
                path,
                Some(ln),
                format!("expected '( CPU ... )' groups, found '{rest}'"),
            ));
        };
        let Some((inner, after)) = open.split_once(')') else {
            return Err(ModelError::parse(
                path,
                Some(ln),
                "unclosed '(' in a CPU group",
            ));
        };
        let g = inner
            .split_whitespace()
            .map(|t| {
                t.parse::<u32>().map_err(|_| {
                    ModelError::parse(path, Some(ln), format!("'{t}' is not a CPU number"))
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        if !g.is_empty() {
            groups.push(g);
        }
        rest = after.trim();
    }
    Ok(groups)
}

fn read_likwid(path: &Path) -> Result<Likwid, ModelError> {
    let text = read_text(path)?;
    let mut out = Likwid::default();
    let mut in_threads = false;
    let mut cache_level: Option<u32> = None;
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let t = line.trim();
        if t.starts_with("HWThread") {
            in_threads = true;
            continue;
        }
        if in_threads {
            if t.starts_with('-') || t.is_empty() {
                in_threads = false;
                continue;
            }
            let f: Vec<&str> = t.split_whitespace().collect();
            let nums: Option<Vec<u32>> = f.iter().map(|x| x.parse().ok()).collect();
            match nums {
                Some(v) if v.len() == 4 => out.threads.push((v[0], v[2], v[3], ln)),
                _ => {
                    return Err(ModelError::parse(
                        path,
                        Some(ln),
                        "expected 'HWThread Thread Core Socket' numbers in the thread table",
                    ))
                }
            }
            continue;
        }
        if let Some(v) = t.strip_prefix("CPU name:") {
            out.cpu_name = Some(v.trim().to_string());
        } else if let Some(v) = t.strip_prefix("CPU type:") {
            out.cpu_type = Some(v.trim().to_string());
        } else if let Some(rest) = t.strip_prefix("Socket ") {
            if let Some((_, groups)) = rest.split_once(':') {
                if groups.trim_start().starts_with('(') {
                    let g = parse_paren_groups(path, ln, groups)?;
                    out.sockets.push((g.into_iter().flatten().collect(), ln));
                }
            }
        } else if let Some(v) = t.strip_prefix("Level:") {
            cache_level = v.trim().parse().ok();
        } else if let Some(v) = t.strip_prefix("Cache groups:") {
            let Some(level) = cache_level else {
                return Err(ModelError::parse(
                    path,
                    Some(ln),
                    "'Cache groups' without a preceding 'Level' line",
                ));
            };
            out.caches
                .push((level, parse_paren_groups(path, ln, v)?, ln));
        }
    }
    Ok(out)
}

/// Checks that `groups` partition exactly `cpus`; `what` names the source lines.
fn check_partition(
    path: &Path,
    ln: usize,
    what: &str,
    groups: &[Vec<u32>],
    cpus: &[u32],
) -> Result<(), ModelError> {
    let mut seen = std::collections::HashSet::new();
    for g in groups {
        for c in g {
            if !cpus.contains(c) {
                return Err(ModelError::parse(
                    path,
                    Some(ln),
                    format!(
                        "{what} names CPU {c}, which is not among the measured CPUs {}",
                        format_cpu_list(cpus)
                    ),
                ));
            }
            if !seen.insert(*c) {
                return Err(ModelError::parse(
                    path,
                    Some(ln),
                    format!("{what} lists CPU {c} twice"),
                ));
            }
        }
    }
    if seen.len() != cpus.len() {
        let missing: Vec<u32> = cpus.iter().copied().filter(|c| !seen.contains(c)).collect();
        return Err(ModelError::parse(
            path,
            Some(ln),
            format!("{what} leaves out CPUs {}", format_cpu_list(&missing)),
        ));
    }
    Ok(())
}

/// Imports a Smelt machine database directory (see the module docs). `ghz`
/// overrides the clock rate of `lscpu.txt`.
pub fn import_machinedb(dir: &Path, ghz: Option<f64>) -> Result<Model, ModelError> {
    if let Some(g) = ghz {
        if !(g.is_finite() && (MIN_GHZ..=MAX_GHZ).contains(&g)) {
            return Err(ModelError::Other(format!(
                "--ghz {g}: the clock rate must be between {MIN_GHZ} and {MAX_GHZ} GHz"
            )));
        }
    }
    let send = read_pair_file(&dir.join("pairwise-nsend_send"))?;
    let recv = read_pair_file(&dir.join("pairwise-nsend_receive"))?;
    let rtt_path = dir.join("pairwise-nsend_rtt");
    let rtt = if rtt_path.exists() {
        Some(read_pair_file(&rtt_path)?)
    } else {
        None
    };
    let lscpu_path = dir.join("lscpu.txt");
    let lscpu = if lscpu_path.exists() {
        Some(read_lscpu(&lscpu_path)?)
    } else {
        None
    };
    let likwid_path = dir.join("likwid.txt");
    let likwid = if likwid_path.exists() {
        Some(read_likwid(&likwid_path)?)
    } else {
        None
    };

    // Clock.
    let (ghz, clock_from) = match (ghz, lscpu.as_ref().and_then(|l| l.mhz)) {
        (Some(g), _) => (g, "--ghz".to_string()),
        (None, Some(mhz)) => (
            (mhz * 1e6).round() / 1e9,
            format!("'CPU MHz' of {}", lscpu_path.display()),
        ),
        (None, None) => {
            let why = if lscpu.is_some() {
                "lscpu.txt has no 'CPU MHz' line"
            } else {
                "there is no lscpu.txt"
            };
            return Err(ModelError::Other(format!(
                "{}: no clock rate to turn cycles into ns ({why}); pass --ghz",
                dir.display()
            )));
        }
    };

    // CPUs: lscpu's on-line list, else every CPU measured.
    let measured: Vec<u32> = {
        let mut v: Vec<u32> = send
            .pairs
            .keys()
            .chain(recv.pairs.keys())
            .flat_map(|&(a, b)| [a, b])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let cpus: Vec<u32> = match lscpu.as_ref().and_then(|l| l.online.clone()) {
        Some(list) => list,
        None => measured.clone(),
    };
    if cpus.len() > MAX_CPUS {
        return Err(ModelError::Other(format!(
            "{}: {} CPUs: at most {MAX_CPUS} are supported",
            dir.display(),
            cpus.len()
        )));
    }
    if cpus.len() < 2 {
        return Err(ModelError::Other(format!(
            "{}: at least 2 CPUs are needed, found {}",
            dir.display(),
            cpus.len()
        )));
    }
    let pos: HashMap<u32, usize> = cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let n = cpus.len();
    let to_matrix = |f: &PairFile| -> Result<Vec<Vec<f64>>, ModelError> {
        let mut m = vec![vec![f64::NAN; n]; n];
        for (i, row) in m.iter_mut().enumerate() {
            row[i] = 0.0;
        }
        let mut entries: Vec<_> = f.pairs.iter().collect();
        entries.sort_by_key(|(_, &(_, ln))| ln);
        for (&(s, d), &(v, ln)) in entries {
            let (Some(&i), Some(&j)) = (pos.get(&s), pos.get(&d)) else {
                let bad = if pos.contains_key(&s) { d } else { s };
                return Err(ModelError::parse(
                    &f.path,
                    Some(ln),
                    format!(
                        "unknown CPU {bad}: the machine's CPUs are {} ({})",
                        format_cpu_list(&cpus),
                        if lscpu.as_ref().and_then(|l| l.online.as_ref()).is_some() {
                            "lscpu.txt"
                        } else {
                            "the measured pairs"
                        }
                    ),
                ));
            };
            let ns = v / ghz;
            if !(ns.is_finite() && ns <= crate::MAX_COST_NS) {
                return Err(ModelError::parse(
                    &f.path,
                    Some(ln),
                    format!(
                        "MEAN {v:e} cycles at {ghz} GHz is {ns:e} ns, out of range: at most \
                         {:e} ns is accepted",
                        crate::MAX_COST_NS
                    ),
                ));
            }
            m[i][j] = ns;
        }
        Ok(m)
    };
    let mut send_m = to_matrix(&send)?;
    let mut recv_m = to_matrix(&recv)?;
    let mut rtt_m = rtt.as_ref().map(to_matrix).transpose()?;

    // OS hierarchy from lscpu + likwid.
    let mut levels = Vec::new();
    let mut sources = Vec::new();
    if let Some(lk) = &likwid {
        if !lk.sockets.is_empty() {
            let groups: Vec<Vec<u32>> = lk.sockets.iter().map(|(g, _)| g.clone()).collect();
            check_partition(
                &likwid_path,
                lk.sockets[0].1,
                "the 'Socket' lines",
                &groups,
                &cpus,
            )?;
            levels.push(Level {
                name: "Package".into(),
                groups,
            });
        }
    }
    if let Some(l) = &lscpu {
        if !l.numa.is_empty() {
            let mut numa = l.numa.clone();
            numa.sort_by_key(|(id, _, _)| *id);
            let groups: Vec<Vec<u32>> = numa.iter().map(|(_, g, _)| g.clone()).collect();
            check_partition(
                &lscpu_path,
                numa[0].2,
                "the 'NUMA node' lines",
                &groups,
                &cpus,
            )?;
            levels.push(Level {
                name: "NUMANode".into(),
                groups,
            });
            sources.push("lscpu");
        }
    }
    if let Some(lk) = &likwid {
        for (lvl, name) in [(3, "L3Cache"), (2, "L2Cache")] {
            if let Some((_, groups, ln)) = lk.caches.iter().find(|(l, _, _)| *l == lvl) {
                check_partition(
                    &likwid_path,
                    *ln,
                    &format!("the level {lvl} 'Cache groups'"),
                    groups,
                    &cpus,
                )?;
                levels.push(Level {
                    name: name.into(),
                    groups: groups.clone(),
                });
            }
        }
        if !lk.threads.is_empty() {
            let mut cores: Vec<((u32, u32), Vec<u32>)> = Vec::new();
            for &(t, core, sock, _) in &lk.threads {
                match cores.iter_mut().find(|(k, _)| *k == (sock, core)) {
                    Some((_, g)) => g.push(t),
                    None => cores.push(((sock, core), vec![t])),
                }
            }
            let groups: Vec<Vec<u32>> = cores.into_iter().map(|(_, g)| g).collect();
            check_partition(
                &likwid_path,
                lk.threads[0].3,
                "the HWThread table",
                &groups,
                &cpus,
            )?;
            levels.push(Level {
                name: "Core".into(),
                groups,
            });
        }
        if !levels.is_empty() && levels.iter().any(|l| l.name != "NUMANode") {
            sources.push("likwid");
        }
    }
    let hierarchy = Hierarchy {
        source: if sources.is_empty() {
            "none".into()
        } else {
            sources.join("+")
        },
        levels,
    };

    // Fill missing pairs from the hierarchy the measured costs show.
    let mut probe_model = Model::new(cpus.clone(), send_m.clone(), recv_m.clone());
    probe_model.hierarchy = hierarchy.clone();
    let classes = infer_from_costs(&cpus, &symmetric_cost(&probe_model));
    let mut notes = Vec::new();
    let mut fill = |m: &mut Vec<Vec<f64>>, f: &PairFile| -> Result<(), ModelError> {
        let k = fill_gaps(m, &cpus, &classes).map_err(|e| in_file(e, &f.path))?;
        let file = f.path.file_name().unwrap_or_default().to_string_lossy();
        if k > 0 {
            notes.push(format!(
                "{file}: {k} of {} ordered pairs missing, filled with the median of measured \
                 pairs between the same inferred groups",
                n * (n - 1)
            ));
        }
        if !f.zeros.is_empty() {
            let cells: Vec<String> = f
                .zeros
                .iter()
                .map(|&(s, d, l)| format!("line {l} ({s} -> {d})"))
                .collect();
            notes.push(format!(
                "warning: {file}: {} MEAN{} 0, which is not a possible cost: treated as not \
                 measured and filled: {}",
                f.zeros.len(),
                if f.zeros.len() == 1 { " was" } else { "s were" },
                name_cells(&cells)
            ));
        }
        Ok(())
    };
    fill(&mut send_m, &send)?;
    fill(&mut recv_m, &recv)?;
    if let (Some(m), Some(f)) = (rtt_m.as_mut(), rtt.as_ref()) {
        fill(m, f)?;
    }

    let mut model = Model::new(cpus, send_m, recv_m);
    model.rtt = rtt_m;
    model.hierarchy = hierarchy;
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|s| s.to_string_lossy().to_string()))
        .unwrap_or_else(|| dir.display().to_string());
    let cpu_model = lscpu
        .as_ref()
        .and_then(|l| l.model_name.clone())
        .or_else(|| likwid.as_ref().and_then(|l| l.cpu_name.clone()))
        .or_else(|| {
            likwid
                .as_ref()
                .and_then(|l| l.cpu_type.clone())
                .filter(|t| !t.starts_with("Unknown"))
        })
        .or_else(|| {
            let l = lscpu.as_ref()?;
            Some(format!(
                "{} family {} model {}",
                l.vendor.as_deref()?,
                l.family.as_deref()?,
                l.model.as_deref()?
            ))
        })
        .unwrap_or_else(|| name.clone());
    let p = &mut model.provenance;
    p.host = name;
    p.cpu_model = cpu_model;
    p.date = now_rfc3339();
    p.method = "import:smelt-machinedb".into();
    p.source = Some(dir.display().to_string());
    p.clock_ghz = Some(ghz);
    p.notes.push(format!(
        "costs measured in cycles, converted to ns at {ghz} GHz (from {clock_from})"
    ));
    p.notes.extend(notes);
    model.inferred_hierarchy = Some(infer_hierarchy(&model));
    Ok(model)
}
