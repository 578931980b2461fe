//! Tar import/export (stub).

/// Caps on an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarCaps {
    /// Most files.
    pub max_files: usize,
    /// Largest file.
    pub max_file_bytes: u64,
    /// Largest total.
    pub max_total_bytes: u64,
}

/// One imported file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    /// Clean path.
    pub path: String,
    /// 420 or 493.
    pub mode: u32,
    /// Bytes.
    pub content: Vec<u8>,
}

/// A refused archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarError {
    /// Corrupt.
    #[error("the tar archive is corrupt: {message}")]
    Corrupt {
        /// What.
        message: String,
    },
}

impl TarError {
    /// The field to report.
    pub fn field(&self) -> &'static str {
        "body"
    }
}

/// Reads a tar archive.
pub fn read_tar(bytes: &[u8], caps: &TarCaps) -> Result<Vec<TarFile>, TarError> {
    if bytes.len() as u64 > caps.max_total_bytes {
        return Err(TarError::Corrupt {
            message: String::new(),
        });
    }
    Ok(Vec::new())
}

/// Writes a tar archive.
pub fn write_tar<'a>(files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>) -> Vec<u8> {
    files
        .into_iter()
        .flat_map(|(_, _, b)| b.iter().copied())
        .collect()
}
