//! The checkpoint directory:
//!
//! ```text
//! CHECKPOINT_DIR/
//!   chk-00000007/_MANIFEST          complete once this exists
//!   chk-00000007/<node>-<subtask>.* files private to checkpoint 7
//!   shared/<db>/<file>.sst          RocksDB files shared by checkpoints
//!   LOCK                            held by the process running the job
//! ```

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use tracing::{debug, warn};

use super::{Manifest, PendingCommit};
use crate::state::read_verified;

const MANIFEST: &str = "_MANIFEST";
use super::layout::{CHECKPOINT_PREFIX as PREFIX, LOCK, SHARED};

/// A running job's hold on its checkpoint directory: two jobs recovering
/// from and writing the same checkpoints (and sinks) would overwrite each
/// other's output. An advisory lock of the operating system, so a killed
/// process leaves none behind.
#[derive(Debug)]
pub struct StorageLock {
    _file: File,
}

/// The result of looking for a checkpoint to recover from.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The newest checkpoint that verified.
    pub manifest: Option<Manifest>,
    /// Newer checkpoints that did not, and why.
    pub skipped: Vec<(u64, String)>,
    /// A checkpoint a newer Weir wrote, and its format version: the search
    /// stopped there, for falling back below it would undo its output.
    pub newer: Option<(u64, u32)>,
    /// A checkpoint with a file this process may not read, and which: the
    /// search stopped there, for that is no damage — falling back below it
    /// would undo its output for a permission (see [`CheckpointStorage::unreadable_file`]).
    pub unreadable: Option<(u64, String)>,
}

/// A job's checkpoint directory.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    root: PathBuf,
}

impl CheckpointStorage {
    pub fn open(root: &Path) -> std::io::Result<Self> {
        crate::dirs::create(root)?;
        Ok(CheckpointStorage { root: root.to_path_buf() })
    }

    /// Whether `dir` is a checkpoint directory or one checkpoint in it (to
    /// tell a user who took one for a savepoint).
    pub fn holds_checkpoints(dir: &Path) -> bool {
        let mut names = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.file_name());
        dir.join(MANIFEST).exists() || names.any(|name| name.to_string_lossy().starts_with(PREFIX))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the directory for one running job; `Ok(None)` if another job
    /// (in this process or another) holds it.
    pub fn lock(&self) -> std::io::Result<Option<StorageLock>> {
        let locked = crate::dirs::try_lock_file(&self.root.join(LOCK))?;
        Ok(locked.map(|file| StorageLock { _file: file }))
    }

    /// The directory name of checkpoint `id`, relative to the root.
    pub fn dir_name(id: u64) -> String {
        format!("{PREFIX}{id:08}")
    }

    /// Ids of every checkpoint directory, complete or not, ascending.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            // (A file that happens to be named like one is not a checkpoint.)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str()?.strip_prefix(PREFIX)?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Ids of the checkpoints with a manifest (not necessarily valid), ascending.
    pub fn complete_ids(&self) -> Vec<u64> {
        self.ids().into_iter().filter(|&id| self.is_complete(id)).collect()
    }

    /// Whether checkpoint `id` has its manifest.
    pub fn is_complete(&self, id: u64) -> bool {
        self.manifest_path(id).exists()
    }

    /// Whether `dir` is one checkpoint of a checkpoint directory.
    pub fn is_one_checkpoint(dir: &Path) -> bool {
        let name = dir.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        let named = name.strip_prefix(PREFIX).is_some_and(|id| id.parse::<u64>().is_ok());
        named || dir.join(MANIFEST).exists()
    }

    /// The checkpoint directory holding one checkpoint `dir` (named
    /// `chk-N`), and `N`.
    pub fn of_checkpoint(dir: &Path) -> Option<(CheckpointStorage, u64)> {
        let id = dir.file_name()?.to_str()?.strip_prefix(PREFIX)?.parse().ok()?;
        let root = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some((CheckpointStorage { root: root.to_path_buf() }, id))
    }

    /// An id no checkpoint directory has used, nor anything else named like
    /// one (a stray file `chk-00000006` would fail checkpoint 6).
    pub fn next_id(&self) -> u64 {
        let names = std::fs::read_dir(&self.root).into_iter().flatten().flatten();
        let taken = names.filter_map(|e| e.file_name().to_str()?.strip_prefix(PREFIX)?.parse::<u64>().ok());
        taken.max().map_or(1, |id| id + 1)
    }

    fn manifest_path(&self, id: u64) -> PathBuf {
        self.root.join(Self::dir_name(id)).join(MANIFEST)
    }

    /// Writes `manifest` atomically: to a temporary file, synced, renamed
    /// into place, and the directory synced.
    pub fn write_manifest(&self, manifest: &Manifest) -> std::io::Result<()> {
        let dir = self.root.join(Self::dir_name(manifest.checkpoint));
        std::fs::create_dir_all(&dir)?;
        crate::dirs::write_durably(&dir.join(MANIFEST), &manifest.encode())
    }

    /// The format version of checkpoint `id`'s manifest if a newer Weir
    /// wrote it (see [`Manifest::newer_format`]).
    pub fn newer_format(&self, id: u64) -> Option<u32> {
        std::fs::read(self.manifest_path(id)).ok().and_then(|bytes| Manifest::newer_format(&bytes))
    }

    /// The directory's lineage, made when first asked for: every manifest
    /// written here carries it.
    pub fn lineage(&self) -> std::io::Result<String> {
        crate::dirs::lineage(&self.root)
    }

    /// Reads and verifies checkpoint `id`: its manifest and every file it
    /// refers to must match their checksums.
    pub fn verify(&self, id: u64) -> Result<Manifest, String> {
        let manifest = self.manifest(id)?;
        if let (Some(theirs), Some(ours)) = (&manifest.lineage, crate::dirs::known_lineage(&self.root))
            && *theirs != ours
        {
            return Err(format!(
                "{} was written in another checkpoint directory (lineage {theirs}; this one's is {ours}): copied in by hand?",
                self.manifest_path(id).display()
            ));
        }
        if manifest.checkpoint != id {
            return Err(format!(
                "{} says it is checkpoint {} (moved or copied from another directory?)",
                self.manifest_path(id).display(),
                manifest.checkpoint
            ));
        }
        for file in manifest.files() {
            read_verified(&self.root, file).map_err(|error| error.to_string())?;
        }
        let splits = manifest.tasks.iter().flat_map(|task| task.splits.iter().flatten().map(move |split| (task, split)));
        if let Some((task, split)) = splits.into_iter().find(|(_, split)| split.past_its_end()) {
            return Err(format!(
                "{}: source `{}`'s split {} is at {}, past its end {:?} (edited by hand?)",
                self.manifest_path(id).display(),
                task.node,
                split.id,
                split.next,
                split.end
            ));
        }
        Ok(manifest)
    }

    /// [`CheckpointStorage::verify`], and that the output checkpoint `id`
    /// has yet to commit is whole, its part files where `dir_of` puts each
    /// sink's now (see [`Manifest::commits_in`]): else an older checkpoint,
    /// whose output is computed again, is the one to resume.
    pub fn verify_with_output<'a>(&self, id: u64, dir_of: impl Fn(&str) -> Option<&'a Path>) -> Result<Manifest, String> {
        let manifest = self.verify(id)?;
        for commit in manifest.commits_in(dir_of) {
            let checked = match &commit {
                PendingCommit::Rename { from, to, size } => {
                    let file = PendingCommit::output_file(from, to);
                    PendingCommit::check_size(file, *size).map_err(|e| (file, e))
                }
                PendingCommit::InProgress(part) => part.check().map_err(|e| (&part.in_progress, e)),
                PendingCommit::Kafka(_) => Ok(()),
            };
            checked.map_err(|(file, error)| format!("output file {}: {error}", file.display()))?;
        }
        Ok(manifest)
    }

    /// The manifest of checkpoint `id`, checked against its own checksum
    /// (not the files it refers to: see [`CheckpointStorage::verify`]).
    pub fn manifest(&self, id: u64) -> Result<Manifest, String> {
        let path = self.manifest_path(id);
        let bytes = std::fs::read(&path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        Manifest::decode(&path, &bytes).map_err(|reason| format!("{} is corrupt: {reason}", path.display()))
    }

    /// The newest checkpoint numbered `first` or above that verifies, its
    /// pending output whole in the sink directories `dir_of` gives, logging
    /// every newer one that does not and why.
    pub fn latest_from<'a>(&self, first: u64, dir_of: impl Fn(&str) -> Option<&'a Path>) -> Recovered {
        let mut recovered = Recovered::default();
        // A directory without a manifest never completed: not a checkpoint.
        for id in self.complete_ids().into_iter().rev().take_while(|&id| id >= first) {
            if let Some(version) = self.newer_format(id) {
                recovered.newer = Some((id, version));
                break;
            }
            match self.verify_with_output(id, &dir_of) {
                Ok(manifest) => {
                    recovered.manifest = Some(manifest);
                    break;
                }
                Err(reason) => {
                    if let Some(denied) = self.unreadable_file(id) {
                        recovered.unreadable = Some((id, denied));
                        break;
                    }
                    warn!(checkpoint = id, %reason, "skipping a corrupt checkpoint; trying the one before");
                    recovered.skipped.push((id, reason));
                }
            }
        }
        recovered
    }

    /// Writes the directory's `LINEAGE` again from its checkpoints'
    /// manifests if it was lost (a backup that left out one small file) or
    /// damaged (it does not hold an id as Weir makes them) while they are
    /// there: otherwise every checkpoint would be taken for one copied in
    /// from elsewhere. Returns the lineage restored. Manifests that
    /// disagree restore nothing.
    pub fn restore_lineage(&self) -> std::io::Result<Option<String>> {
        let known = crate::dirs::known_lineage(&self.root);
        if known.as_deref().is_some_and(crate::dirs::is_lineage_id) {
            return Ok(None);
        }
        let Some(lineage) = self.checkpoints_lineage() else { return Ok(None) };
        crate::dirs::write_lineage(&self.root, &lineage)?;
        let dir = self.root.display();
        match known {
            None => warn!(%dir, %lineage, "the checkpoint directory's LINEAGE file was missing; restored it from its checkpoints"),
            Some(damaged) => {
                warn!(%dir, %lineage, ?damaged, "the checkpoint directory's LINEAGE file was damaged; restored it from its checkpoints")
            }
        }
        Ok(Some(lineage))
    }

    /// The lineage the manifests of all complete checkpoints carry, if
    /// there are some and they agree on one.
    pub fn checkpoints_lineage(&self) -> Option<String> {
        let lineages: HashSet<String> =
            self.complete_ids().into_iter().filter_map(|id| self.manifest(id).ok()?.lineage).collect();
        (lineages.len() == 1).then(|| lineages.into_iter().next().expect("one"))
    }

    /// Why checkpoint `id` cannot be read if a file of it is there but may
    /// not be read (its permissions, or its directory's): its manifest, or
    /// a file the manifest lists. Its verification failed; this tells a
    /// checkpoint one cannot read from a damaged one.
    fn unreadable_file(&self, id: u64) -> Option<String> {
        let denied = |path: &Path| match std::fs::File::open(path) {
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                Some(format!("cannot read {}: {error}", path.display()))
            }
            _ => None,
        };
        let manifest_path = self.manifest_path(id);
        if let Some(denied) = denied(&manifest_path) {
            return Some(denied);
        }
        let manifest = Manifest::decode(&manifest_path, &std::fs::read(&manifest_path).ok()?).ok()?;
        manifest.files().find_map(|file| denied(&self.root.join(&file.path)))
    }

    /// Keeps the newest `retain` complete checkpoints up to and including
    /// `newest`, deletes older and abandoned ones, and shared files no kept
    /// checkpoint refers to.
    pub fn retain(&self, newest: u64, retain: usize) {
        let complete: Vec<u64> = self.complete_ids().into_iter().filter(|&id| id <= newest).collect();
        let keep: Vec<u64> = complete.iter().rev().take(retain.max(1)).copied().collect();
        for id in self.ids().into_iter().filter(|&id| id < newest && !keep.contains(&id)) {
            let dir = self.root.join(Self::dir_name(id));
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => debug!(checkpoint = id, "deleted an old checkpoint"),
                Err(error) => warn!(checkpoint = id, %error, "cannot delete an old checkpoint"),
            }
        }
        let referenced: HashSet<String> = keep
            .iter()
            .filter_map(|&id| Manifest::decode(&self.manifest_path(id), &std::fs::read(self.manifest_path(id)).ok()?).ok())
            .flat_map(|m| m.files().map(|f| f.path.clone()).collect::<Vec<_>>())
            .collect();
        self.delete_unreferenced(&self.root.join(SHARED), &referenced);
    }

    fn delete_unreferenced(&self, dir: &Path, referenced: &HashSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                self.delete_unreferenced(&path, referenced);
                let _ = std::fs::remove_dir(&path); // Only if now empty.
                continue;
            }
            let relative = path.strip_prefix(&self.root).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if !referenced.contains(&relative) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}
