//! The savepoint manifest and the encoding of its data files.
//!
//! ```text
//! DIR/_SAVEPOINT                 "weir-savepoint 1 crc32=XXXXXXXX\n" + JSON manifest
//! DIR/<uid>/keyed-<first>-<last>.wsk
//!     "WEIRSK01", then entries sorted by (key group, state, key, value):
//!     key group u16, state u32 (a descriptor id), key (u32 len + bytes),
//!     value (u32 len + bytes); little-endian
//! DIR/<uid>/broadcast.wsb
//!     "WEIRSB01", u32 maps, each: name, u32 entries, (key, value)...
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::connectors::SourceSplit;
use crate::state::{FileRef, strip_header, with_header};

/// The version of the savepoint format this Weir writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The manifest's file name; a savepoint exists once it does.
pub const MANIFEST_FILE: &str = "_SAVEPOINT";
const HEADER: &str = "weir-savepoint";
pub(super) const KEYED_MAGIC: &[u8; 8] = b"WEIRSK01";
pub(super) const BROADCAST_MAGIC: &[u8; 8] = b"WEIRSB01";

/// What a savepoint holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointManifest {
    pub format: u32,
    pub job: String,
    /// The checkpoint of the job it was made from.
    pub checkpoint: u64,
    /// When it was written, ms since the Unix epoch.
    pub taken_at_ms: i64,
    /// The job's number of key groups; a restore must use the same.
    pub max_parallelism: u32,
    /// The job file it was taken from (to fork from a savepoint alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_file: Option<JobDefinition>,
    pub operators: Vec<OperatorSnapshot>,
    pub sources: Vec<SourceSnapshot>,
}

/// A job file's path and text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDefinition {
    pub path: PathBuf,
    pub text: String,
}

/// An operator's state, by uid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorSnapshot {
    pub uid: String,
    /// The plugin file it ran, and that file's SHA-256.
    pub plugin: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_sha256: Option<String>,
    /// The SHA-256 of its `config` table (absent from savepoints before it
    /// was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// Its parallelism when the savepoint was taken.
    pub parallelism: u32,
    /// The states entries refer to, by `id`.
    pub states: Vec<StateDescriptor>,
    /// Keyed entries, one file per subtask that had any, by key-group range.
    pub keyed: Vec<KeyedFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<FileRef>,
    /// The lowest watermark of its subtasks, if each had one: restored,
    /// its subtasks judge events against it as they did (see
    /// `plugin::snapshot`). Absent from savepoints before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
}

/// One state of an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDescriptor {
    pub id: u32,
    /// The name the plugin opened it by.
    pub name: String,
    pub kind: StateKind,
    /// Its values expire (it was opened with a time-to-live): each stored
    /// value ends with the time it expires at, 8 bytes (i64 LE, ms since
    /// the epoch, processing time). Entries expired when the savepoint was
    /// written are left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expires: bool,
}

/// What kind of state a descriptor is, and so how its entries read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateKind {
    /// key = the key; value = the plugin's bytes.
    Value,
    /// key = primary key length (u32 LE) ++ primary key ++ sub-key.
    Map,
    /// key = the timer's key; value = its timestamp (i64 LE, ms).
    EventTimer,
    ProcessingTimer,
}

impl StateKind {
    pub fn is_timer(self) -> bool {
        matches!(self, StateKind::EventTimer | StateKind::ProcessingTimer)
    }
}

/// A file of keyed entries covering key groups `first..=last`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyedFile {
    pub file: FileRef,
    pub first_key_group: u32,
    pub last_key_group: u32,
    pub entries: u64,
    /// Where each non-empty key group's entries start.
    pub index: Vec<KeyGroupIndex>,
}

/// A key group's entries in a [`KeyedFile`]: `entries` entries from byte
/// `offset` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupIndex {
    pub key_group: u32,
    pub offset: u64,
    pub entries: u64,
}

/// A source's positions, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceSnapshot {
    pub name: String,
    pub parallelism: u32,
    pub splits: Vec<SourceSplit>,
}

impl SavepointManifest {
    pub fn operator(&self, uid: &str) -> Option<&OperatorSnapshot> {
        self.operators.iter().find(|o| o.uid == uid)
    }

    pub fn source(&self, name: &str) -> Option<&SourceSnapshot> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// Every data file.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.operators.iter().flat_map(|o| o.keyed.iter().map(|k| &k.file).chain(o.broadcast.iter()))
    }

    /// The manifest as stored: checksum line, then JSON.
    pub fn encode(&self) -> Vec<u8> {
        with_header(HEADER, FORMAT_VERSION, &serde_json::to_vec_pretty(self).expect("a savepoint manifest serialises"))
    }

    /// Parses and checks a stored manifest.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<SavepointManifest, String> {
        let json = strip_header(bytes, HEADER, FORMAT_VERSION)?;
        let manifest: SavepointManifest =
            serde_json::from_slice(json).map_err(|error| format!("{}: {error}", path.display()))?;
        // The checksum guards against damage, not against a hand edit.
        if !crate::state::MAX_PARALLELISM_RANGE.contains(&manifest.max_parallelism) {
            return Err(format!(
                "{}: max_parallelism {} is outside {:?}; the manifest was edited by hand?",
                path.display(),
                manifest.max_parallelism,
                crate::state::MAX_PARALLELISM_RANGE
            ));
        }
        manifest.check_consistent().map_err(|reason| format!("{}: {reason}; the manifest was edited by hand?", path.display()))?;
        Ok(manifest)
    }

    /// What a checksum cannot vouch for: key groups within
    /// `max_parallelism`, and source positions within their splits.
    fn check_consistent(&self) -> Result<(), String> {
        for operator in &self.operators {
            for file in &operator.keyed {
                let groups = file.index.iter().map(|index| index.key_group).chain([file.first_key_group, file.last_key_group]);
                if let Some(group) = groups.into_iter().find(|&group| group >= self.max_parallelism) {
                    return Err(format!(
                        "operator `{}`'s {} holds key group {group}, beyond the {} the savepoint has",
                        operator.uid, file.file.path, self.max_parallelism
                    ));
                }
            }
        }
        for source in &self.sources {
            if let Some(split) = source.splits.iter().find(|split| split.past_its_end()) {
                return Err(format!("source `{}`'s split {} is at {}, past its end {:?}", source.name, split.id, split.next, split.end));
            }
        }
        Ok(())
    }
}

/// A uid as a directory name, one per uid: ASCII letters, digits, `-` and
/// `_` stay, any other byte becomes `%` and its two hex digits, and so
/// does a leading `_` (the savepoint's own files start with one). Before,
/// every other character became `_`, so that `c:1` and `c;1` wrote over
/// each other's files. Readers go by the paths the manifest records.
pub(super) fn dir_name(uid: &str) -> String {
    let mut name = String::with_capacity(uid.len());
    for (i, byte) in uid.bytes().enumerate() {
        let kept = byte.is_ascii_alphanumeric() || byte == b'-' || (byte == b'_' && i > 0);
        match kept {
            true => name.push(byte as char),
            false => name.push_str(&format!("%{byte:02X}")),
        }
    }
    // A directory name is at most 255 bytes; a uid is at most 200, but
    // escaped it can be three times that.
    if name.len() > 200 {
        let digest = crate::plugin::sha256_hex(uid.as_bytes());
        name.truncate(120); // (ASCII: escaped)
        name.push('-');
        name.push_str(&digest[..32]);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every uid gets a directory of its own, none of them a name the
    /// savepoint's own files have.
    #[test]
    fn uids_name_directories_one_to_one() {
        let uids = ["count", "word_count", "c:1", "c;1", "c_1", "c%3A1", "_SAVEPOINT", "_TAKEN_BY_HOST", "ü", "a b"];
        let names: std::collections::HashSet<String> = uids.iter().map(|uid| dir_name(uid)).collect();
        assert_eq!(names.len(), uids.len(), "{names:?}");
        assert_eq!(dir_name("count"), "count");
        assert_eq!(dir_name("word_count"), "word_count");
        assert_eq!(dir_name("c:1"), "c%3A1");
        assert_eq!(dir_name("_SAVEPOINT"), "%5FSAVEPOINT");
        let long = "é".repeat(100);
        assert!(dir_name(&long).len() <= 200 && dir_name(&long) != dir_name(&"è".repeat(100)));
    }

    /// A manifest whose checksum holds can still have been edited by hand
    /// into one no job can restore.
    #[test]
    fn a_manifest_with_no_key_groups_is_refused() {
        let mut manifest = SavepointManifest {
            format: FORMAT_VERSION,
            job: "j".into(),
            checkpoint: 1,
            taken_at_ms: 0,
            max_parallelism: 128,
            job_file: None,
            operators: Vec::new(),
            sources: Vec::new(),
        };
        let path = Path::new("sp/_SAVEPOINT");
        assert_eq!(SavepointManifest::decode(path, &manifest.encode()), Ok(manifest.clone()));
        manifest.max_parallelism = 0;
        let error = SavepointManifest::decode(path, &manifest.encode()).unwrap_err();
        assert!(error.contains("sp/_SAVEPOINT: max_parallelism 0 is outside 1..=32768"), "{error}");

        manifest.max_parallelism = 128;
        let past = SourceSplit { id: 0, next: 30, end: Some(20), shape: 0 };
        manifest.sources = vec![SourceSnapshot { name: "gen".into(), parallelism: 1, splits: vec![past] }];
        let error = SavepointManifest::decode(path, &manifest.encode()).unwrap_err();
        assert!(error.contains("source `gen`'s split 0 is at 30, past its end Some(20)"), "{error}");
        manifest.sources.clear();
        let index = vec![KeyGroupIndex { key_group: 500, offset: 8, entries: 1 }];
        let file = FileRef { path: "count/keyed-00000-00127.wsk".into(), size: 9, crc32: 0 };
        let keyed = vec![KeyedFile { file, first_key_group: 0, last_key_group: 127, entries: 1, index }];
        let operator = OperatorSnapshot {
            uid: "count".into(),
            plugin: "p.wasm".into(),
            plugin_sha256: None,
            config_sha256: None,
            parallelism: 1,
            states: Vec::new(),
            keyed,
            broadcast: None,
            watermark: None,
        };
        manifest.operators = vec![operator];
        let error = SavepointManifest::decode(path, &manifest.encode()).unwrap_err();
        assert!(error.contains("holds key group 500, beyond the 128 the savepoint has"), "{error}");
    }
}
