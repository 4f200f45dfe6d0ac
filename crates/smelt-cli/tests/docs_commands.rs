//! Every command the README and the docs show works from a clone of this repository:
//! each `smelt SUBCOMMAND` exists and takes every option written after it (checked
//! against its `--help`), and each script or folder a shell line names
//! (`bash scripts/run.sh`, `sh bench/...`) is in the repository — nothing points
//! outside it (`../shared/...`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and docs/*.md.
fn documents() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The shell lines of a document: the lines of its ```sh / ```bash / ```console
/// blocks, and inline code spans that start with `smelt ` or `bash `.
fn shell_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_shell = false;
    let mut in_other = false;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            if in_shell || in_other {
                in_shell = false;
                in_other = false;
            } else if matches!(lang.trim(), "sh" | "bash" | "console" | "shell") {
                in_shell = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if in_shell {
            out.push(t.trim_start_matches("$ ").to_string());
        } else if !in_other {
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 && (span.starts_with("smelt ") || span.starts_with("bash ")) {
                    out.push(span.to_string());
                }
            }
        }
    }
    out
}

/// Every shell line of README.md and docs/*.md, with its document's name.
fn all_shell_lines() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc
            .strip_prefix(root())
            .unwrap_or(&doc)
            .display()
            .to_string();
        out.extend(shell_lines(&text).into_iter().map(|l| (name.clone(), l)));
    }
    out
}

/// `smelt A B --x y -z` (up to a comment, pipe or `;`): the subcommand path and the
/// options written.
fn smelt_command(line: &str) -> Option<(Vec<String>, Vec<String>)> {
    let line = line.split(" #").next()?;
    let mut words = line.split_whitespace().skip_while(|w| {
        !(*w == "smelt" || w.ends_with("/smelt")) || w.contains('=') || w.starts_with('-')
    });
    words.next()?;
    let mut path = Vec::new();
    let mut options = Vec::new();
    for w in words {
        if matches!(w, "|" | ";" | "&&" | "||" | ">" | "2>" | "<") || w.starts_with('>') {
            break;
        }
        if let Some(o) = w.strip_prefix("--") {
            if o.is_empty() {
                break; // `smelt launch -n 2 -- prog`: the program's own arguments follow
            }
            let name = o.split(['=', '[', ']', ',']).next().unwrap();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                options.push(format!("--{name}"));
            }
        } else if w.len() == 2 && w.starts_with('-') && w.as_bytes()[1].is_ascii_alphabetic() {
            options.push(w.to_string());
        } else if options.is_empty()
            && path.len() < 2
            && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        {
            path.push(w.to_string());
        }
    }
    Some((path, options))
}

/// `smelt PATH --help`, memoised; `None` when that is not a subcommand.
fn help(cache: &mut BTreeMap<Vec<String>, Option<String>>, path: &[String]) -> Option<String> {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
                .args(path)
                .arg("--help")
                .output()
                .unwrap();
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
}

#[test]
fn every_documented_smelt_command_and_option_exists() {
    let top = {
        let mut c = BTreeMap::new();
        help(&mut c, &[]).unwrap()
    };
    let mut cache = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (name, line) in all_shell_lines() {
        {
            for part in line.split(['|', ';']).flat_map(|p| p.split("&&")) {
                let Some((mut path, options)) = smelt_command(part) else {
                    continue;
                };
                // A word after the subcommand that is not a subcommand of it is an argument.
                while !path.is_empty() && help(&mut cache, &path).is_none() {
                    path.pop();
                }
                let Some(first) = path.first() else {
                    if !options.iter().all(|o| top.contains(o.as_str())) {
                        problems.push(format!("{name}: `{line}`: no subcommand"));
                    }
                    continue;
                };
                let _ = first;
                let h = help(&mut cache, &path).unwrap();
                for o in &options {
                    let listed = h.contains(&format!("{o} "))
                        || h.contains(&format!("{o},"))
                        || h.contains(&format!("{o}\n"))
                        || h.contains(&format!("{o}["))
                        || h.contains(&format!("{o}="));
                    if !listed {
                        problems.push(format!(
                            "{name}: `{line}`: smelt {} has no option {o}",
                            path.join(" ")
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} commands found: is the parser broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_script_a_shell_line_names_is_in_the_repository() {
    let mut problems = Vec::new();
    for (name, line) in all_shell_lines() {
        {
            let line = line.split(" #").next().unwrap_or("");
            for w in line.split_whitespace() {
                if w.starts_with("../") {
                    problems.push(format!("{name}: `{line}` reaches outside the repository"));
                }
                let is_script = (w.starts_with("scripts/") || w.starts_with("bench/"))
                    && (w.ends_with(".sh") || w.ends_with(".py"));
                if is_script && !root().join(w).is_file() {
                    problems.push(format!("{name}: `{line}`: {w} does not exist"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_parser_finds_subcommands_and_options() {
    assert_eq!(
        smelt_command("smelt tree --model m.json -o t.svg  # draw"),
        Some((
            vec!["tree".to_string()],
            vec!["--model".to_string(), "-o".to_string()]
        ))
    );
    assert_eq!(
        smelt_command("SMELT_TUNE=x target/release/smelt model show m.json --json | head"),
        Some((vec!["model".into(), "show".into()], vec!["--json".into()]))
    );
    assert_eq!(
        smelt_command("smelt launch -n 2 -- ./prog --not-ours"),
        Some((vec!["launch".into()], vec!["-n".into()]))
    );
    let lines = shell_lines("text `smelt info --all` more\n```sh\nsmelt probe -o x\n```\n```json\n{\"smelt x\": 1}\n```\n");
    assert_eq!(lines, vec!["smelt info --all", "smelt probe -o x"]);
}
