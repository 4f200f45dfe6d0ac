//! Reading an input file safely: the one bounded reader of every smelt file (models,
//! trees, tuning files, histories), here at the bottom so that the tree file's
//! [`Tree::load`](crate::Tree::load) needs no model crate; `smelt_model::files`
//! re-exports it with its own error type.
//!
//! An input must be a regular file: FIFOs, sockets and devices are refused before they
//! are opened (and the file is opened non-blocking and checked again, so swapping one
//! in between cannot block), and an input larger than [`max_input_bytes`] (64 MiB by
//! default, `SMELT_MAX_INPUT_BYTES` to change) is refused without being read.

use std::fs::{FileType, Metadata};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Default bound on the size of one input file: 64 MiB (a 4096-CPU model is
/// about 40 MiB of JSON).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 << 20;

/// Environment variable that changes [`DEFAULT_MAX_INPUT_BYTES`]: a number of bytes,
/// optionally with a `K`, `M` or `G` suffix (powers of 1024), e.g. `256M`.
pub const MAX_INPUT_ENV: &str = smelt_settings::MAX_INPUT_BYTES;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file cannot be read, is not a regular file or is too large.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS (or the checks) said.
        source: io::Error,
    },
    /// The size limit's setting cannot be used.
    #[error("{0}")]
    Limit(String),
    /// The file is not UTF-8 text ([`read_input_text`]).
    #[error("{path}: the file is not UTF-8 text", path = path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

/// The input size bound in force: `SMELT_MAX_INPUT_BYTES` if set, else
/// [`DEFAULT_MAX_INPUT_BYTES`]. An unreadable setting is an error naming it.
pub fn max_input_bytes() -> Result<u64, InputError> {
    match smelt_settings::bytes(MAX_INPUT_ENV) {
        Ok(None) => Ok(DEFAULT_MAX_INPUT_BYTES),
        Ok(Some(n)) if n > 0 => Ok(n),
        Ok(Some(_)) => Err(InputError::Limit(format!(
            "environment variable {MAX_INPUT_ENV}: 0 is not a size limit"
        ))),
        Err(e) => Err(InputError::Limit(e.to_string())),
    }
}

/// What a file type is, in words (`a FIFO`, `a directory`, ...).
pub fn kind_of(ft: &FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// The OS reason of an I/O error, without the path decorations some libraries add
/// (e.g. tempfile's "at path .tmpXYZ").
pub fn os_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code).to_string(),
        None => e.kind().to_string(),
    }
}

fn io_err(path: &Path, kind: io::ErrorKind, why: String) -> InputError {
    InputError::Io {
        path: path.into(),
        source: io::Error::new(kind, why),
    }
}

fn too_big(path: &Path, len: u64, limit: u64) -> InputError {
    io_err(
        path,
        io::ErrorKind::InvalidData,
        format!(
            "the file is larger than the input limit of {limit} bytes ({len}{} bytes); \
             set {MAX_INPUT_ENV} to raise it",
            if len > limit { "+" } else { "" }
        ),
    )
}

fn check_input_meta(path: &Path, meta: &Metadata, limit: u64) -> Result<(), InputError> {
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(io_err(
            path,
            io::ErrorKind::InvalidInput,
            format!("is {}, not a regular file", kind_of(&ft)),
        ));
    }
    if meta.len() > limit {
        return Err(too_big(path, meta.len(), limit));
    }
    Ok(())
}

/// Reads a whole input file: refuses what is not a regular file and what is
/// larger than [`max_input_bytes`]. Errors name the path.
pub fn read_input(path: &Path) -> Result<Vec<u8>, InputError> {
    let limit = max_input_bytes()?;
    let io = |e: io::Error| InputError::Io {
        path: path.into(),
        source: io::Error::new(e.kind(), os_reason(&e)),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    check_input_meta(path, &meta, limit)?;
    // Non-blocking: if a FIFO was swapped in after the check, opening it must not
    // wait for a writer. Regular files ignore the flag.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    check_input_meta(path, &meta, limit)?;
    let mut buf = Vec::with_capacity(meta.len() as usize);
    (&mut f).take(limit + 1).read_to_end(&mut buf).map_err(io)?;
    if buf.len() as u64 > limit {
        return Err(too_big(path, buf.len() as u64, limit));
    }
    Ok(buf)
}

/// [`read_input`] as UTF-8 text.
pub fn read_input_text(path: &Path) -> Result<String, InputError> {
    String::from_utf8(read_input(path)?).map_err(|_| InputError::NotText { path: path.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let e = read_input(Path::new("/")).unwrap_err().to_string();
        assert!(e.contains("is a directory, not a regular file"), "{e}");
        let e = read_input(Path::new("/nonexistent/x"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/x: "), "{e}");
        let dir = std::env::temp_dir().join(format!("smelt-plan-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bin");
        std::fs::write(&f, [0xffu8, 0xfe]).unwrap();
        assert_eq!(read_input(&f).unwrap(), vec![0xff, 0xfe]);
        let e = read_input_text(&f).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
