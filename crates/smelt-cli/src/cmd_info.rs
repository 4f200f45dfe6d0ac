//! `smelt info`: what this smelt is and what it would use, like `ompi_info --all` or
//! `ucx_info -c`: the build, every `SMELT_*` setting with its value and where that
//! came from, the model a command given none would use, the tuning file `auto`
//! reads, the MPI interposer library, and which MPI the libraries were built against.

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use smelt_settings::{Audience, Origin};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = "Examples:\n  smelt info\n  smelt info --all --json\n  \
                  SMELT_MPI_TREE=binary smelt info | grep MPI_TREE")]
pub struct InfoArgs {
    /// Also list the variables smelt's launchers set for the processes they start
    /// (SMELT_JOB, SMELT_RANK, ...) and those of tests.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The file beside the `smelt` executable, if there.
fn beside_exe(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(name);
    p.is_file().then_some(p)
}

/// The shared libraries an ELF file names as needed (`DT_NEEDED`, what `readelf -d`
/// lists), read from its dynamic section; `None` if it is not a 64-bit little-endian
/// ELF file with one. Reads the headers and the two sections, not the whole file.
fn needed_libraries(path: &std::path::Path) -> Option<Vec<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut read_at = |off: u64, len: usize| -> Option<Vec<u8>> {
        if len > 64 << 20 {
            return None;
        }
        let mut b = vec![0u8; len];
        f.seek(SeekFrom::Start(off)).ok()?;
        f.read_exact(&mut b).ok()?;
        Some(b)
    };
    let u16_at = |b: &[u8], i: usize| Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let h = read_at(0, 64)?;
    // "\x7fELF", 64-bit, little-endian.
    if h[..4] != *b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let (shoff, shentsize, shnum) = (
        u64_at(&h, 0x28)?,
        u16_at(&h, 0x3a)? as usize,
        u16_at(&h, 0x3c)? as usize,
    );
    if shentsize < 64 || shnum == 0 {
        return None;
    }
    let sh = read_at(shoff, shentsize * shnum)?;
    // (type, offset, size, link) of section i.
    let section = |i: usize| -> Option<(u32, u64, u64, u32)> {
        let b = sh.get(i * shentsize..(i + 1) * shentsize)?;
        Some((
            u32_at(b, 4)?,
            u64_at(b, 0x18)?,
            u64_at(b, 0x20)?,
            u32_at(b, 0x28)?,
        ))
    };
    const SHT_DYNAMIC: u32 = 6;
    let (_, dyn_off, dyn_size, link) =
        (0..shnum).find_map(|i| section(i).filter(|s| s.0 == SHT_DYNAMIC))?;
    let (_, str_off, str_size, _) = section(link as usize)?;
    let dynamic = read_at(dyn_off, usize::try_from(dyn_size).ok()?)?;
    let strings = read_at(str_off, usize::try_from(str_size).ok()?)?;
    const DT_NEEDED: u64 = 1;
    let mut out = Vec::new();
    for e in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0)?, u64_at(e, 8)? as usize);
        if tag == 0 {
            break; // DT_NULL
        }
        if tag == DT_NEEDED {
            let name = strings.get(val..)?;
            let end = name.iter().position(|&c| c == 0)?;
            out.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    Some(out)
}

/// Which MPI a library was built against, from the MPI library it needs: `Some("Open
/// MPI (libmpi.so.40)")`, `Some("MPICH (libmpich.so.12)")`; `None`: it needs no MPI
/// library (built without MPI) or is not a readable ELF file.
fn mpi_of(path: &std::path::Path) -> Option<String> {
    let needed = needed_libraries(path)?;
    let lib = needed.iter().find(|n| n.starts_with("libmpi"))?;
    let which = if lib.starts_with("libmpich") {
        "MPICH"
    } else if lib.starts_with("libmpi.so") {
        "Open MPI"
    } else {
        "an MPI"
    };
    Some(format!("{which} ({lib})"))
}

/// The tuning file `auto` reads on this host and what became of it.
fn tuning(model: &smelt_model::Model) -> Value {
    let path = smelt_tree::tuning::cached_path(&model.provenance.host);
    match smelt_tree::tuning::host_file(model) {
        Ok(Some((p, f))) => json!({
            "path": p, "state": "in use",
            "source": format!("{:?}", f.source).to_lowercase(),
        }),
        Ok(None) => json!({ "path": path, "state": "absent: auto predicts (smelt tune measures)" }),
        Err(e) => json!({ "path": path, "state": format!("refused: {e}") }),
    }
}

pub fn run(a: InfoArgs) -> Result<()> {
    let report = info(a.all)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    crate::common::print_text(&text(&report));
    Ok(())
}

/// What `smelt info --json` prints: the build, the host's model and tuning file, and
/// the settings (`all`: every one, else those a user sets or has set).
fn info(all: bool) -> Result<Value> {
    let settings: Vec<Value> = smelt_settings::report()
        .into_iter()
        .filter(|c| all || c.setting.audience == Audience::User || c.value.is_some())
        .map(|c| {
            json!({
                "name": c.setting.name,
                "value": c.value,
                "default": c.setting.default,
                "origin": match c.origin { Origin::Environment => "environment", Origin::Default => "default" },
                "kind": c.setting.kind.describe(),
                "area": c.setting.area,
                "doc": c.setting.doc,
                "problem": c.problem,
            })
        })
        .collect();
    // The model a command given none uses, without the notice it would print.
    let (model, source) = smelt_model::default_model::resolve(None, None)?;
    let mpi_lib = smelt_settings::path(smelt_settings::MPI_LIB)
        .map(|p| (p, "SMELT_MPI_LIB"))
        .or_else(|| beside_exe("libsmelt_mpi.so").map(|p| (p, "beside smelt")));
    let report = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": {
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
            "c_library": beside_exe("libsmelt.so"),
            // libsmelt's MPI worlds (smelt_world_from_mpi: its `mpi` feature) and
            // the MPI it was built against; null: built without MPI.
            "c_library_mpi": beside_exe("libsmelt.so").and_then(|p| mpi_of(&p)),
            "mpi_interposer": mpi_lib.as_ref().map(|(p, from)| json!({
                "path": p, "found": from, "mpi": mpi_of(p),
            })),
        },
        "host": smelt_model::host::host_name(),
        "model": {
            "source": source.kind(),
            "what": source.to_string(),
            "cpus": smelt_model::format_cpu_list(&model.cpus),
            "cache": smelt_model::host::cached_model_path(),
        },
        "tuning_file": tuning(&model),
        "settings": settings,
    });
    Ok(report)
}

/// The human form of [`info`]'s report.
fn text(report: &Value) -> String {
    let mut s = String::new();
    let b = &report["build"];
    let _ = writeln!(
        s,
        "smelt {} ({} build, {})",
        report["version"].as_str().unwrap_or(""),
        b["profile"].as_str().unwrap_or(""),
        b["target"].as_str().unwrap_or("")
    );
    let path_or = |v: &Value, none: &str| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| none.to_string())
    };
    let _ = writeln!(
        s,
        "  C library (libsmelt.so):      {}",
        match (b["c_library"].as_str(), b["c_library_mpi"].as_str()) {
            (Some(p), Some(mpi)) => format!("{p} (MPI worlds: {mpi})"),
            (Some(p), None) =>
                format!("{p} (without MPI: cargo build -p smelt-capi --features mpi)"),
            (None, _) => "not beside smelt (cargo build -p smelt-capi)".into(),
        }
    );
    let _ = writeln!(
        s,
        "  MPI interposer:               {}",
        match b["mpi_interposer"].as_object() {
            Some(o) => format!(
                "{} ({}; built against {})",
                o["path"].as_str().unwrap_or(""),
                o["found"].as_str().unwrap_or(""),
                o["mpi"].as_str().unwrap_or("no MPI library it names")
            ),
            None => "not found (cargo build --release -p smelt-mpi --features mpi)".into(),
        }
    );
    let _ = writeln!(s, "host: {}", report["host"].as_str().unwrap_or(""));
    let _ = writeln!(
        s,
        "  model used when none is given: {} (CPUs {})",
        report["model"]["what"].as_str().unwrap_or(""),
        report["model"]["cpus"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "  host model cache:              {}",
        path_or(
            &report["model"]["cache"],
            "none (no XDG_CACHE_HOME or HOME)"
        )
    );
    let _ = writeln!(
        s,
        "  tuning file:                   {} ({})",
        path_or(&report["tuning_file"]["path"], "none"),
        report["tuning_file"]["state"].as_str().unwrap_or("")
    );
    let _ = writeln!(s, "settings (environment variables):");
    for v in report["settings"].as_array().into_iter().flatten() {
        let value = match v["value"].as_str() {
            Some(x) => format!("{x}  [environment]"),
            None => match v["default"].as_str() {
                Some("") | None => "unset".to_string(),
                Some(d) => format!("{d}  [default]"),
            },
        };
        let _ = writeln!(s, "  {:<24} {value}", v["name"].as_str().unwrap_or(""));
        let _ = writeln!(
            s,
            "  {:<24}   {} ({})",
            "",
            v["doc"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        );
        if let Some(p) = v["problem"].as_str() {
            let _ = writeln!(s, "  {:<24}   REFUSED: {p}", "");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_libraries_reads_an_elf_files_dynamic_section() {
        // This test program is a dynamically linked ELF file that needs the C library.
        let exe = std::env::current_exe().unwrap();
        let needed = needed_libraries(&exe).expect("an ELF file with a dynamic section");
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
        // It needs no MPI library; a file that is not ELF is no library at all.
        assert_eq!(mpi_of(&exe), None);
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("not-elf.so");
        std::fs::write(&text, b"\x7fELF but not really").unwrap();
        assert_eq!(needed_libraries(&text), None);
        assert_eq!(needed_libraries(&dir.path().join("absent.so")), None);
    }
}
