//! Reading inputs and writing outputs safely, for every smelt command and the
//! library's own [`crate::Model::load`] / [`crate::Model::save`].
//!
//! **Inputs** ([`read_input`]) must be regular files (a directory is read file by
//! file by the importers). FIFOs, sockets and devices are refused before they are
//! opened (and the file is opened non-blocking and checked again, so swapping one in
//! between cannot block), and an input larger than [`max_input_bytes`] (64 MiB by
//! default, `SMELT_MAX_INPUT_BYTES` to change) is refused without being read.
//!
//! **Outputs** ([`check_output`], [`write_atomic`], [`write_atomic_with`]):
//! * the output must not be the same file as an input (device and inode compared,
//!   so hard links, symbolic links and `./x` vs `x` are all caught);
//! * an existing output that is not a regular file (FIFO, device, directory,
//!   socket) is never written or replaced;
//! * a symbolic link is written *through*: the file it points to is replaced and
//!   the link stays; a link that points nowhere is refused;
//! * the file is written to a temporary file in the target's directory, then
//!   renamed over the target, so a failure never leaves a partial file.
//!
//! Commands call [`check_output`] before doing any work, so a long measurement is
//! never thrown away because its result cannot be written.

use crate::ModelError;
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use smelt_plan::input::{kind_of, os_reason, DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_ENV};

/// The bounded reader's error ([`smelt_plan::input`], where the one reader lives) as
/// this crate's: the same messages.
fn input_err(e: smelt_plan::input::InputError) -> ModelError {
    use smelt_plan::input::InputError;
    match e {
        InputError::Io { path, source } => ModelError::Io { path, source },
        InputError::Limit(why) => ModelError::Other(crate::text::escape_line(&why).into()),
        InputError::NotText { path } => ModelError::parse(path, None, "the file is not UTF-8 text"),
    }
}

/// The input size bound in force: `SMELT_MAX_INPUT_BYTES` if set, else
/// [`DEFAULT_MAX_INPUT_BYTES`]. An unreadable setting is an error naming it.
pub fn max_input_bytes() -> Result<u64, ModelError> {
    smelt_plan::input::max_input_bytes().map_err(input_err)
}

/// Reads a whole input file: refuses what is not a regular file and what is
/// larger than [`max_input_bytes`]. Errors name the path.
pub fn read_input(path: &Path) -> Result<Vec<u8>, ModelError> {
    smelt_plan::input::read_input(path).map_err(input_err)
}

/// [`read_input`] as UTF-8 text.
pub fn read_input_text(path: &Path) -> Result<String, ModelError> {
    smelt_plan::input::read_input_text(path).map_err(input_err)
}

/// An error about an output path: `cannot write PATH: WHY`.
fn out_err(path: &Path, why: impl Into<String>) -> ModelError {
    ModelError::Output {
        path: path.into(),
        why: why.into(),
    }
}

/// The file identity (device, inode) of an existing path, following links.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// The inputs this process was given (see [`declare_inputs`]).
static DECLARED_INPUTS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Declares paths this process reads as inputs (the `smelt` command declares every
/// path named on its command line that is not an output option, before any work):
/// from then on every output check ([`check_output`], and so [`write_atomic`],
/// [`crate::Model::save`], tuning and cache files) refuses to write any of them, or
/// any file inside a declared directory, whatever path or link leads to it.
pub fn declare_inputs<P: Into<PathBuf>>(paths: impl IntoIterator<Item = P>) {
    let mut d = DECLARED_INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    d.extend(paths.into_iter().map(Into::into));
}

/// The inputs declared so far ([`declare_inputs`]).
pub fn declared_inputs() -> Vec<PathBuf> {
    DECLARED_INPUTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Checks that `path` can be written as an output and is none of `inputs` nor of
/// the [declared inputs](declare_inputs) (for a directory input, none of the files
/// in it); returns the path to write: `path` itself, or for a symbolic link the
/// file it points to. Creates nothing.
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<PathBuf, ModelError> {
    if path.as_os_str().is_empty() {
        return Err(out_err(path, "the output path is empty"));
    }
    let target = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(t) => t,
            Err(e) => {
                return Err(out_err(
                    path,
                    format!(
                        "it is a symbolic link that cannot be followed ({}); smelt writes \
                         through links only to an existing file",
                        os_reason(&e)
                    ),
                ))
            }
        },
        _ => path.to_path_buf(),
    };
    match std::fs::metadata(&target) {
        Ok(m) if !m.file_type().is_file() => {
            return Err(out_err(
                path,
                format!(
                    "it is {}{}; smelt only writes regular files",
                    kind_of(&m.file_type()),
                    if target != path {
                        format!(" (through the link to {})", target.display())
                    } else {
                        String::new()
                    }
                ),
            ))
        }
        Ok(m) => {
            let me = (m.dev(), m.ino());
            let declared = declared_inputs();
            let all = inputs
                .iter()
                .copied()
                .chain(declared.iter().map(|p| p.as_path()));
            for input in all {
                if same_as_input(me, input) {
                    return Err(out_err(
                        path,
                        format!(
                            "it is the same file as the input {}; pick another output file",
                            input.display()
                        ),
                    ));
                }
            }
        }
        // Missing, or a parent is not a directory: the directory check says which.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) => {}
        Err(e) => return Err(out_err(path, os_reason(&e))),
    }
    let dir = parent_dir(&target);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(out_err(
                path,
                format!("{} is not a directory", dir.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(out_err(
                path,
                format!("directory {} does not exist", dir.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(out_err(
                path,
                format!("{} is not a directory", dir.display()),
            ))
        }
        Err(e) => return Err(out_err(path, os_reason(&e))),
    }
    // The one reliable writability test: create (and drop) a temporary file there.
    tempfile::Builder::new()
        .prefix(".smelt-check")
        .tempfile_in(dir)
        .map_err(|e| {
            out_err(
                path,
                format!("directory {}: {}", dir.display(), os_reason(&e)),
            )
        })?;
    Ok(target)
}

fn same_as_input(out: (u64, u64), input: &Path) -> bool {
    let Ok(m) = std::fs::metadata(input) else {
        return false;
    };
    if (m.dev(), m.ino()) == out {
        return true;
    }
    if m.is_dir() {
        if let Ok(rd) = std::fs::read_dir(input) {
            return rd
                .filter_map(|e| e.ok())
                .any(|e| identity(&e.path()) == Some(out));
        }
    }
    false
}

fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `path` (see the module docs: checked with [`check_output`],
/// through a temporary file in the same directory and a rename), so readers never
/// see a partial file and a failure leaves nothing behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    write_atomic_with(path, "", |tmp| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(tmp)
            .map_err(|e| os_reason(&e))?;
        f.write_all(bytes).map_err(|e| os_reason(&e))
    })
}

/// Like [`write_atomic`], for writers that need a path: `fill` writes the content
/// to the temporary file it is given (named with `suffix`, e.g. `.png`, for
/// libraries that pick the format by extension); its error message becomes the
/// error's reason.
pub fn write_atomic_with(
    path: &Path,
    suffix: &str,
    fill: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), ModelError> {
    let target = check_output(path, &[])?;
    let dir = parent_dir(&target);
    let tmp = tempfile::Builder::new()
        .prefix(".smelt-")
        .suffix(suffix)
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| out_err(path, os_reason(&e)))?;
    fill(tmp.path()).map_err(|why| out_err(path, why))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| out_err(path, os_reason(&e)))?;
    // Keep the mode of a file being replaced.
    if let Ok(m) = std::fs::metadata(&target) {
        let _ = std::fs::set_permissions(tmp.path(), m.permissions());
    }
    tmp.persist(&target)
        .map_err(|e| out_err(path, os_reason(&e.error)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_refuse_inputs_links_to_them_and_non_files() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.json");
        std::fs::write(&input, "x").unwrap();
        let e = check_output(&input, &[&input]).unwrap_err().to_string();
        assert!(e.contains("same file as the input"), "{e}");
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        assert!(check_output(&link, &[&input]).is_err());
        let hard = d.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        assert!(check_output(&hard, &[&input]).is_err());
        // A directory input: its files are inputs too.
        assert!(check_output(&input, &[d.path()]).is_err());
        // A link to another file is written through.
        let other = d.path().join("other.json");
        std::fs::write(&other, "old").unwrap();
        let l2 = d.path().join("l2.json");
        std::os::unix::fs::symlink(&other, &l2).unwrap();
        write_atomic(&l2, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&l2)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "new");
        // A dangling link, a directory, a missing directory.
        let dangling = d.path().join("dangling");
        std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
        assert!(write_atomic(&dangling, b"x").is_err());
        assert!(write_atomic(d.path(), b"x").is_err());
        let e = write_atomic(&d.path().join("no/such.json"), b"x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not exist") && !e.contains(".smelt-"),
            "{e}"
        );
    }

    #[test]
    fn inputs_must_be_small_regular_files() {
        let d = tempfile::tempdir().unwrap();
        let e = read_input(d.path()).unwrap_err().to_string();
        assert!(e.contains("a directory, not a regular file"), "{e}");
        let e = read_input(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        let p = d.path().join("big");
        std::fs::write(&p, vec![b' '; 100]).unwrap();
        assert_eq!(read_input(&p).unwrap().len(), 100);
    }
}
