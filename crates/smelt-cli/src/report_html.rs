//! The page of `smelt report`: one self-contained HTML file (inline CSS, inline SVG
//! charts and trees, the cost heat map as an inline PNG, no script but a check that
//! every image decoded) made from the report's JSON. Sections the run did not reach
//! say why. Tables of the benchmark sections are made from their JSON generically, so
//! a new field of a report shows up without changes here.

use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Characters that must not reach HTML raw.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\n' => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// The machine: `smelt model show --json` and the cost heat map (PNG, base64).
/// `bound(secs)`: how long a command that wants `secs` may run (the report's
/// deadline shortens it).
pub fn machine_data(
    model: &smelt_model::Model,
    model_path: &Path,
    out: &Path,
    bound: &dyn Fn(f64) -> Duration,
) -> Value {
    let args = vec![
        "model".to_string(),
        "show".into(),
        model_path.display().to_string(),
        "--json".into(),
    ];
    let summary = crate::cmd_report::run_smelt(&args, bound(60.0), &out.join("model.log"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    let png = out.join("costs.png");
    let heatmap = smelt_model::heatmap::save_png(model, &png)
        .ok()
        .and_then(|_| std::fs::read(&png).ok())
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b));
    json!({ "summary": summary, "heatmap_png_base64": heatmap })
}

/// The tree `auto` picks for each operation (`smelt tree --algo auto --format json`),
/// each command bounded as in [`machine_data`].
pub fn trees_data(model_path: &Path, out: &Path, bound: &dyn Fn(f64) -> Duration) -> Value {
    let mut m = Map::new();
    for op in ["broadcast", "reduce", "barrier"] {
        let args: Vec<String> = [
            "tree", "--algo", "auto", "--format", "json", "--op", op, "--model",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([model_path.display().to_string()])
        .collect();
        let log = out.join(format!("tree-{op}.log"));
        if let Some(v) = crate::cmd_report::run_smelt(&args, bound(120.0), &log)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        {
            m.insert(op.into(), v);
        }
    }
    Value::Object(m)
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// A tree as SVG: levels top-down, children spread under their parent.
fn tree_svg(t: &Value) -> Option<String> {
    let root = t["root"].as_u64()?;
    let kids = |p: u64| -> Vec<u64> {
        t["children"][p.to_string()]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    // x by leaf order, y by depth.
    let mut pos: Vec<(u64, f64, usize)> = Vec::new();
    let mut edges = Vec::new();
    fn place(
        n: u64,
        depth: usize,
        next: &mut f64,
        kids: &dyn Fn(u64) -> Vec<u64>,
        pos: &mut Vec<(u64, f64, usize)>,
        edges: &mut Vec<(u64, u64)>,
    ) -> f64 {
        let ks = kids(n);
        let x = if ks.is_empty() || depth > 64 {
            *next += 1.0;
            *next - 1.0
        } else {
            let xs: Vec<f64> = ks
                .iter()
                .map(|&k| {
                    edges.push((n, k));
                    place(k, depth + 1, next, kids, pos, edges)
                })
                .collect();
            (xs[0] + xs[xs.len() - 1]) / 2.0
        };
        pos.push((n, x, depth));
        x
    }
    let mut next = 0.0;
    place(root, 0, &mut next, &kids, &mut pos, &mut edges);
    let depth = pos.iter().map(|p| p.2).max().unwrap_or(0);
    let (dx, dy) = (34.0, 54.0);
    let w = (next * dx).max(dx) + 20.0;
    let h = (depth as f64 + 1.0) * dy + 10.0;
    let at = |n: u64| {
        pos.iter()
            .find(|p| p.0 == n)
            .map(|p| (p.1 * dx + 27.0, p.2 as f64 * dy + 22.0))
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\">"
    );
    for (a, b) in &edges {
        if let (Some((x1, y1)), Some((x2, y2))) = (at(*a), at(*b)) {
            let _ = write!(s, "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#777\"/>");
        }
    }
    for (n, _, _) in &pos {
        if let Some((x, y)) = at(*n) {
            let fill = if *n == root { "#c0392b" } else { "#2e86c1" };
            let _ = write!(
                s,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"12\" fill=\"{fill}\"/><text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\" fill=\"#fff\">{n}</text>",
                y + 3.5
            );
        }
    }
    s.push_str("</svg>");
    Some(s)
}

/// One bar: label, value, highlighted (smelt's own).
type Bar = (String, f64, bool);

/// Horizontal bars.
fn bars_svg(rows: &[Bar], unit: fn(f64) -> String) -> String {
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1e-9);
    let (lw, bw, rh) = (240.0, 360.0, 20.0);
    let h = rows.len() as f64 * rh + 6.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{h:.0}\">",
        lw + bw + 90.0
    );
    for (i, (label, v, hi)) in rows.iter().enumerate() {
        let y = i as f64 * rh + 3.0;
        let len = (v / max * bw).max(1.0);
        let fill = if *hi { "#c0392b" } else { "#5d6d7e" };
        let _ = write!(
            s,
            "<text x=\"{:.0}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text><rect x=\"{:.0}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"{:.0}\" fill=\"{fill}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text>",
            lw - 6.0,
            y + 13.0,
            esc(label),
            lw,
            rh - 5.0,
            lw + len + 4.0,
            y + 13.0,
            esc(&unit(*v))
        );
    }
    s.push_str("</svg>");
    s
}

/// Flattens an object one level (`ns.median`), for tables.
fn flat(v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(o) = v.as_object() {
        for (k, x) in o {
            match x {
                Value::Object(inner) => {
                    for (k2, y) in inner {
                        if !y.is_object() && !y.is_array() {
                            out.push((format!("{k}.{k2}"), scalar(y)));
                        }
                    }
                }
                Value::Array(_) => {}
                _ => out.push((k.clone(), scalar(x))),
            }
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() != 0.0 => format!("{f:.3}"),
            _ => n.to_string(),
        },
        Value::Null => "".into(),
        other => other.to_string(),
    }
}

/// Every array of objects in `v` as a table, and its plain fields as a list.
fn generic(v: &Value, s: &mut String) {
    let Some(o) = v.as_object() else {
        let _ = write!(
            s,
            "<pre>{}</pre>",
            esc(&serde_json::to_string_pretty(v).unwrap_or_default())
        );
        return;
    };
    let plain: Vec<(String, String)> = o
        .iter()
        .filter(|(_, x)| !x.is_object() && !x.is_array())
        .map(|(k, x)| (k.clone(), scalar(x)))
        .collect();
    if !plain.is_empty() {
        s.push_str("<table class=\"kv\">");
        for (k, x) in plain {
            let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&x));
        }
        s.push_str("</table>");
    }
    for (k, x) in o {
        match x {
            Value::Array(rows) if rows.iter().any(Value::is_object) => {
                let flats: Vec<Vec<(String, String)>> = rows.iter().take(300).map(flat).collect();
                let mut cols: Vec<String> = Vec::new();
                for r in &flats {
                    for (c, _) in r {
                        if !cols.contains(c) && cols.len() < 14 {
                            cols.push(c.clone());
                        }
                    }
                }
                let _ = write!(s, "<h3>{}</h3><table><tr>", esc(k));
                for c in &cols {
                    let _ = write!(s, "<th>{}</th>", esc(c));
                }
                s.push_str("</tr>");
                for r in &flats {
                    s.push_str("<tr>");
                    for c in &cols {
                        let cell = r
                            .iter()
                            .find(|(k, _)| k == c)
                            .map(|x| x.1.as_str())
                            .unwrap_or("");
                        let _ = write!(s, "<td>{}</td>", esc(cell));
                    }
                    s.push_str("</tr>");
                }
                s.push_str("</table>");
            }
            Value::Object(_) if k != "auto" => {
                let _ = write!(s, "<h3>{}</h3>", esc(k));
                generic(x, s);
            }
            _ => {}
        }
    }
}

fn machine(v: &Value, s: &mut String) {
    if let Some(b64) = v["heatmap_png_base64"].as_str() {
        let _ = write!(
            s,
            "<figure><img alt=\"send and receive costs between CPUs\" src=\"data:image/png;base64,{b64}\"><figcaption>Measured send and receive costs between every pair of CPUs (the paper's Figure 6)</figcaption></figure>"
        );
    }
    generic(&v["summary"], s);
}

fn trees(v: &Value, s: &mut String) {
    let Some(o) = v.as_object() else { return };
    for (op, t) in o {
        let algo = t["algo"].as_str().unwrap_or("?");
        let from = t["auto"]["from"].as_str().unwrap_or("");
        let pred = num(&t["predicted_ns"][op.as_str()])
            .map(fmt_ns)
            .unwrap_or_default();
        let _ = write!(
            s,
            "<h3>{}: {} <small>({}; predicted {})</small></h3>",
            esc(op),
            esc(algo),
            esc(from),
            esc(&pred)
        );
        if let Some(svg) = tree_svg(t) {
            let _ = write!(s, "<div class=\"tree\">{svg}</div>");
        }
    }
}

fn collectives(v: &Value, s: &mut String) {
    // smelt's default against the peers, per operation and member count.
    let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
    for p in v["peers"].as_array().into_iter().flatten() {
        let (Some(name), Some(ns)) = (p["name"].as_str(), num(&p["ns"]["median"])) else {
            continue;
        };
        // Threads and processes (Open MPI's ranks) of one size side by side.
        let key = format!(
            "{} ({} members)",
            p["metric"].as_str().unwrap_or(""),
            p["threads"]
        );
        let label = match p["mode"].as_str() {
            Some("processes") if !name.contains("MPI") => format!("{name} [processes]"),
            _ => name.to_string(),
        };
        let row = (label, ns, name.starts_with("smelt"));
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(row),
            None => groups.push((key, vec![row])),
        }
    }
    for (key, rows) in &groups {
        let _ = write!(s, "<h3>{}</h3>{}", esc(key), bars_svg(rows, fmt_ns));
    }
    // Predicted against measured, per topology, for each operation.
    let mut ops: Vec<String> = Vec::new();
    for c in v["collectives"].as_array().into_iter().flatten() {
        if let Some(op) = c["op"].as_str() {
            if !ops.iter().any(|o| o == op) {
                ops.push(op.into());
            }
        }
    }
    for op in ops {
        let rows: Vec<Bar> = v["collectives"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["op"].as_str() == Some(op.as_str()))
            .flat_map(|c| {
                let t = c["topology"].as_str().unwrap_or("?").to_string();
                let mut r = Vec::new();
                if let Some(m) = num(&c["ns"]["median"]) {
                    r.push((format!("{t} measured"), m, true));
                }
                if let Some(p) = num(&c["predicted_ns"]) {
                    r.push((format!("{t} predicted"), p, false));
                }
                r
            })
            .collect();
        if !rows.is_empty() {
            let _ = write!(
                s,
                "<h3>{}: measured and predicted, per topology</h3>{}",
                esc(&op),
                bars_svg(&rows, fmt_ns)
            );
        }
    }
    generic(v, s);
}

const CSS: &str = "body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}\
h1{font-size:1.6em}h2{border-bottom:2px solid #2e86c1;padding-bottom:.2em;margin-top:2em}\
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\
th{background:#eef}.kv th{width:14em}.skipped{color:#a04000}.tree{overflow-x:auto}\
img{max-width:100%}figure{margin:0}small{color:#666;font-weight:normal}nav a{margin-right:1em}";

/// The sections of the page, in order: (id, title).
pub const SECTIONS: &[(&str, &str)] = &[
    ("machine", "The machine"),
    ("trees", "The trees smelt picks"),
    ("collectives", "Collectives against the peers"),
    ("processes", "Collectives as processes"),
    ("mpi", "The MPI interposer"),
    ("am", "Active messages (LogP)"),
    ("aggregation", "Aggregation"),
    ("offload", "Offload"),
    ("tasks", "Tasks"),
    ("large", "Large messages"),
    ("tuning", "The tuning table"),
];

/// The whole page.
pub fn page(r: &Value) -> String {
    let mut s = String::new();
    let host = r["host"].as_str().unwrap_or("?");
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>smelt report: {}</title><style>{CSS}</style></head><body>",
        esc(host)
    );
    let _ = write!(
        s,
        "<h1>smelt report: {} <small>({}, CPUs {})</small></h1><p>{} — {} s of a {} s limit; model: {}</p>",
        esc(host),
        esc(r["cpu_model"].as_str().unwrap_or("")),
        esc(r["cpus"].as_str().unwrap_or("")),
        esc(r["tool"].as_str().unwrap_or("")),
        r["seconds"],
        r["time_limit"],
        esc(&scalar(&r["model"]))
    );
    for w in r["warnings"].as_array().into_iter().flatten() {
        let _ = write!(
            s,
            "<p class=\"skipped\">warning: {}</p>",
            esc(w.as_str().unwrap_or(""))
        );
    }
    let wanted: Vec<&str> = r["sections"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    s.push_str("<nav>");
    for (id, title) in SECTIONS.iter().filter(|(id, _)| wanted.contains(id)) {
        let _ = write!(s, "<a href=\"#{id}\">{}</a>", esc(title));
    }
    s.push_str("</nav><h2 id=\"steps\">What ran</h2>");
    generic(&json!({ "steps": r["steps"] }), &mut s);
    for (id, title) in SECTIONS.iter().filter(|(id, _)| wanted.contains(id)) {
        let _ = write!(s, "<section id=\"{id}\"><h2>{}</h2>", esc(title));
        let d = &r["data"][*id];
        if d.is_null() {
            let why = r["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["id"] == *id)
                .and_then(|x| x["why"].as_str())
                .unwrap_or("no result");
            let _ = write!(s, "<p class=\"skipped\">Not measured: {}</p>", esc(why));
        } else {
            match *id {
                "machine" => machine(d, &mut s),
                "trees" => trees(d, &mut s),
                "collectives" | "processes" => collectives(d, &mut s),
                _ => generic(d, &mut s),
            }
        }
        s.push_str("</section>");
    }
    // The one script: marks the page once every image decoded (what the browser test
    // checks), and any script error.
    s.push_str(
        "<script>window.addEventListener('error',function(){document.body.dataset.errors='yes'});\
window.addEventListener('load',function(){var bad=0;for(var i of document.images){if(!i.complete||i.naturalWidth===0)bad++;}\
document.body.dataset.images=bad===0?'ok':'broken:'+bad;});</script></body></html>",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_every_section_asked_for_and_escapes_what_it_shows() {
        let r = json!({
            "host": "h<script>", "cpus": "0-1", "tool": "smelt", "seconds": 1, "time_limit": 5,
            "sections": ["machine", "trees", "collectives", "mpi"],
            "steps": [{"id": "mpi", "status": "skipped", "why": "no mpirun"}],
            "warnings": ["cut short by --time-limit 5: <tasks> not started"],
            "data": {
                "trees": {"broadcast": {"algo": "binary", "root": 0, "children": {"0": [1, 2]},
                          "predicted_ns": {"broadcast": 120.0}, "auto": {"from": "prediction"}}},
                "collectives": {"peers": [
                    {"name": "smelt (auto: x)", "metric": "barrier", "threads": 2, "ns": {"median": 50.0}},
                    {"name": "pthread_barrier", "metric": "barrier", "threads": 2, "ns": {"median": 90.0}}],
                    "collectives": [{"topology": "binary", "op": "broadcast", "ns": {"median": 200.0}, "predicted_ns": 150.0}]},
            }
        });
        let p = page(&r);
        for id in ["machine", "trees", "collectives", "mpi"] {
            assert!(p.contains(&format!("<section id=\"{id}\">")), "{id}");
        }
        assert!(!p.contains("<section id=\"tasks\">"));
        assert!(p.contains("Not measured: no mpirun"));
        assert!(p.contains("warning: cut short by --time-limit 5: &lt;tasks&gt; not started"));
        assert!(p.contains("h&lt;script&gt;") && !p.contains("h<script>"));
        assert!(p.contains("<circle") && p.contains("pthread_barrier"));
        assert!(p.contains("binary predicted"));
    }
}
