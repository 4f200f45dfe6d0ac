//! `smelt report` as a user runs it: within its time limit it writes one
//! self-contained HTML page and its JSON; a real browser (headless Chromium) loads the
//! page without script errors, every section asked for is there, every image decodes;
//! a screenshot is kept as a test artifact (target/tmp/smelt-report.png).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../../tests/support/skip.rs"]
mod skip;

const SECTIONS: &[&str] = &["machine", "trees", "collectives", "mpi"];

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Chromium headless on `page` with `args`; its stdout.
fn browse(browser: &str, page: &Path, args: &[String]) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_report_page_loads_in_a_browser_with_every_section_and_image() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("report");
    let start = Instant::now();
    let st = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args([
            "report",
            "--time-limit",
            "60",
            "--only",
            &SECTIONS.join(","),
        ])
        .arg("--out")
        .arg(&out)
        .env("XDG_CACHE_HOME", d.path().join("cache"))
        .status()
        .unwrap();
    assert!(st.success());
    // Its limit, plus the bound of the step that was running when it was reached.
    assert!(
        start.elapsed() < Duration::from_secs(200),
        "{:?}",
        start.elapsed()
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(json["data"]["machine"]["heatmap_png_base64"].is_string());
    assert!(json["data"]["collectives"]["peers"].is_array());
    let page = out.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing loaded from the network (the SVG namespace is a name).
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no network"
    );
    let Some(browser) = chromium() else {
        skip::tool_missing("chromium");
        return;
    };
    let dom = browse(browser, &page, &["--dump-dom".into()]);
    assert!(
        dom.contains("data-images=\"ok\""),
        "an image did not decode, or the page did not load: {}",
        &dom[..dom.len().min(300)]
    );
    assert!(!dom.contains("data-errors"), "a script error");
    for s in SECTIONS {
        assert!(
            dom.contains(&format!("<section id=\"{s}\">")),
            "section {s} missing"
        );
    }
    assert!(dom.contains("<img") && dom.contains("<svg"));
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smelt-report.png");
    let _ = std::fs::remove_file(&shot);
    browse(
        browser,
        &page,
        &[
            "--window-size=1200,3000".into(),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
}

#[test]
fn an_unknown_section_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(["report", "--only", "machine,nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown section 'nope'"));
}
