//! Snapshot files: written once, described by a [`FileRef`] (path, size,
//! CRC-32) that the checkpoint manifest keeps, and verified against it
//! before any byte is used on restore — so that a flipped bit or a
//! truncated file is reported, never silently restored.
//!
//! [`RecordWriter`] and [`RecordReader`] are the little-endian encoding the
//! host's own snapshot files use (length-prefixed byte strings, fixed-width
//! integers).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::StateError;

/// A file of a snapshot, relative to the checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    pub size: u64,
    pub crc32: u32,
}

/// Writes `bytes` to `root/path` and syncs it to disk.
pub fn write_verified(root: &Path, path: String, bytes: &[u8]) -> Result<FileRef, StateError> {
    let full = root.join(&path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent).map_err(StateError::io(parent))?;
    }
    let mut file = File::create(&full).map_err(StateError::io(&full))?;
    file.write_all(bytes).map_err(StateError::io(&full))?;
    file.sync_all().map_err(StateError::io(&full))?;
    Ok(FileRef { path, size: bytes.len() as u64, crc32: crc32fast::hash(bytes) })
}

/// Reads the file `file` refers to, checking its size and checksum.
pub fn read_verified(root: &Path, file: &FileRef) -> Result<Vec<u8>, StateError> {
    let full = root.join(&file.path);
    let bytes = std::fs::read(&full).map_err(StateError::io(&full))?;
    check(&full, file, &bytes)?;
    Ok(bytes)
}

/// Checks `bytes` against the size and checksum `file` recorded.
fn check(full: &Path, file: &FileRef, bytes: &[u8]) -> Result<(), StateError> {
    let corrupt = |reason| StateError::Corrupt { path: full.to_path_buf(), reason };
    if bytes.len() as u64 != file.size {
        return Err(corrupt(format!("it has {} bytes, the manifest says {} (truncated?)", bytes.len(), file.size)));
    }
    let crc = crc32fast::hash(bytes);
    if crc != file.crc32 {
        return Err(corrupt(format!("checksum {crc:08x} does not match the manifest's {:08x}", file.crc32)));
    }
    Ok(())
}

/// A JSON document behind a checksummed header line, as manifests are
/// stored: `<kind> <version> crc32=<8 hex digits of the JSON's CRC-32>`.
pub fn with_header(kind: &str, version: u32, json: &[u8]) -> Vec<u8> {
    let mut out = format!("{kind} {version} crc32={:08x}\n", crc32fast::hash(json)).into_bytes();
    out.extend_from_slice(json);
    out
}

/// The JSON behind a header [`with_header`] wrote, once the header names
/// `kind` and `version` and the checksum matches; else why not.
pub fn strip_header<'a>(bytes: &'a [u8], kind: &str, version: u32) -> Result<&'a [u8], String> {
    let newline = bytes.iter().position(|&b| b == b'\n').ok_or("it has no header line (truncated?)")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "its header is not text")?;
    let json = &bytes[newline + 1..];
    let mut words = header.split(' ');
    let (Some(found), Some(found_version), Some(crc)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("its header {header:?} is not a `{kind}` header"));
    };
    if found != kind {
        return Err(format!("its header {header:?} is not a `{kind}` header"));
    }
    if found_version != version.to_string() {
        return Err(match found_version.parse::<u32>() {
            Ok(newer) if newer > version => format!(
                "it was written by a newer Weir (format version {newer}; this one reads version {version}): use that \
                 Weir or a later one"
            ),
            _ => format!("it has format version {found_version}; this Weir reads version {version}"),
        });
    }
    let expected = crc.strip_prefix("crc32=").and_then(|c| u32::from_str_radix(c, 16).ok());
    let actual = crc32fast::hash(json);
    if expected != Some(actual) {
        return Err(format!("its checksum is {actual:08x}, its header says {crc} (corrupt or truncated)"));
    }
    Ok(json)
}

/// The format version in the header [`with_header`] wrote for `kind`, if
/// `bytes` start with one (whatever the rest holds).
pub fn header_version(bytes: &[u8], kind: &str) -> Option<u32> {
    let line = bytes.split(|&b| b == b'\n').next()?;
    let mut words = std::str::from_utf8(line).ok()?.split(' ');
    (words.next()? == kind).then_some(())?;
    words.next()?.parse().ok()
}

/// Builds a snapshot file in memory.
#[derive(Debug, Default)]
pub struct RecordWriter {
    bytes: Vec<u8>,
}

impl RecordWriter {
    /// A file that starts with `magic` (8 bytes naming format and version).
    pub fn new(magic: &[u8; 8]) -> Self {
        RecordWriter { bytes: magic.to_vec() }
    }

    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// A byte string: its length (u32), then its bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.bytes.extend_from_slice(v);
    }

    /// What `other` holds, copied after what this holds.
    pub fn append(&mut self, other: &RecordWriter) {
        self.bytes.extend_from_slice(&other.bytes);
    }

    /// Bytes written so far (the offset of the next record).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads what a [`RecordWriter`] wrote; running out of bytes is corruption.
pub struct RecordReader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
}

impl<'a> RecordReader<'a> {
    /// Checks the magic and starts reading after it.
    pub fn new(path: &'a Path, bytes: &'a [u8], magic: &[u8; 8]) -> Result<Self, StateError> {
        let mut reader = RecordReader { path, bytes };
        if reader.take(8)? != magic {
            return Err(reader.corrupt(format!("it does not start with {:?}", String::from_utf8_lossy(magic))));
        }
        Ok(reader)
    }

    /// Reads records from `bytes`, the middle of a file whose magic was
    /// checked (as an index points into it).
    pub fn resume(path: &'a Path, bytes: &'a [u8]) -> Self {
        RecordReader { path, bytes }
    }

    fn corrupt(&self, reason: String) -> StateError {
        StateError::Corrupt { path: self.path.to_path_buf(), reason }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.bytes.len() < n {
            return Err(self.corrupt("it ends in the middle of a record".into()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    pub fn u16(&mut self) -> Result<u16, StateError> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, StateError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, StateError> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn i64(&mut self) -> Result<i64, StateError> {
        self.array().map(i64::from_le_bytes)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], StateError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub fn string(&mut self) -> Result<String, StateError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt("a name is not UTF-8".into()))
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }
}
