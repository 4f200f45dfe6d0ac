//! `smelt info`: every `SMELT_*` setting smelt reads, with its value and where it came
//! from, a refused value named as refused, and the model and tuning file in use.

use std::process::Command;

fn info(envs: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let cache = tempfile::tempdir().unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_smelt"));
    c.arg("info").args(args).env("XDG_CACHE_HOME", cache.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("SMELT_") {
            c.env_remove(k);
        }
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn every_user_setting_is_listed_with_its_value_and_origin() {
    let (ok, text) = info(&[("SMELT_MPI_TREE", "binary")], &[]);
    assert!(ok, "{text}");
    for s in smelt_settings::ALL
        .iter()
        .filter(|s| s.audience == smelt_settings::Audience::User)
    {
        assert!(text.contains(s.name), "{} missing:\n{text}", s.name);
    }
    let line = text.lines().find(|l| l.contains("SMELT_MPI_TREE")).unwrap();
    assert!(
        line.contains("binary") && line.contains("[environment]"),
        "{line}"
    );
    let line = text.lines().find(|l| l.contains("SMELT_SHM_DIR")).unwrap();
    assert!(line.contains("[default]"), "{line}");
    assert!(
        text.contains("model used when none is given: a uniform model"),
        "{text}"
    );
    assert!(text.contains("tuning file:"), "{text}");
}

#[test]
fn a_garbage_value_is_shown_refused_and_json_lists_everything_with_all() {
    let (ok, text) = info(&[("SMELT_MAX_INPUT_BYTES", "lots")], &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("REFUSED: environment variable SMELT_MAX_INPUT_BYTES: \"lots\""),
        "{text}"
    );
    let (ok, text) = info(&[("SMELT_RANK", "3")], &["--all", "--json"]);
    assert!(ok, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), smelt_settings::ALL.len());
    let rank = v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "SMELT_RANK")
        .unwrap();
    assert_eq!(rank["value"], "3");
    assert_eq!(rank["origin"], "environment");
    assert_eq!(v["model"]["source"], "uniform");
}
