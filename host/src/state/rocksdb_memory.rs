//! The memory budgets of a subtask's RocksDB, as a job file sets them
//! (`[rocksdb]`): the block cache, the memtables and the write-back layer
//! of hot entries in front of the database.

use serde::Deserialize;

/// How much memory one subtask's database may use: the job file's
/// `[rocksdb]` table, in MiB. The three budgets add up to what a subtask
/// holds at most beyond RocksDB's own bookkeeping (index and filter blocks
/// of open files, iterators): `block_cache_mb + 2 × write_buffer_mb +
/// hot_entries_mb`, 80 MiB by default. A field the table leaves out keeps
/// its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RocksDbMemory {
    /// Cached blocks of the database's files (32). 0: no cache, every read
    /// of an entry not in the write-back layer goes to the file system.
    pub block_cache_mb: u32,
    /// One memtable (16); two may exist at once, one being flushed. At
    /// least 1: a smaller memtable means more, smaller files.
    pub write_buffer_mb: u32,
    /// The write-back layer of recently used entries in front of the
    /// database (16). 0: every state write of a batch reaches RocksDB.
    pub hot_entries_mb: u32,
}

impl Default for RocksDbMemory {
    fn default() -> Self {
        RocksDbMemory { block_cache_mb: 32, write_buffer_mb: 16, hot_entries_mb: 16 }
    }
}

impl RocksDbMemory {
    /// Checks the budgets a job file gave; the error names the field and
    /// says what it must be.
    pub fn validate(&self) -> Result<(), String> {
        if self.write_buffer_mb == 0 {
            return Err("[rocksdb] write_buffer_mb must be at least 1 (MiB per memtable; 16 by default)".into());
        }
        for (field, mb) in [
            ("block_cache_mb", self.block_cache_mb),
            ("write_buffer_mb", self.write_buffer_mb),
            ("hot_entries_mb", self.hot_entries_mb),
        ] {
            if mb > MAX_BUDGET_MB {
                return Err(format!(
                    "[rocksdb] {field} = {mb} is more than {MAX_BUDGET_MB} MiB; the budgets are per operator subtask, in MiB"
                ));
            }
        }
        Ok(())
    }

    pub(super) fn block_cache_bytes(&self) -> usize {
        mebibytes(self.block_cache_mb)
    }

    pub(super) fn write_buffer_bytes(&self) -> usize {
        mebibytes(self.write_buffer_mb)
    }

    pub(super) fn hot_entries_bytes(&self) -> usize {
        mebibytes(self.hot_entries_mb)
    }
}

/// The most any one budget may be (1 TiB), so that a value given in bytes
/// by mistake is an error and not an allocation that fails later.
const MAX_BUDGET_MB: u32 = 1 << 20;

fn mebibytes(mb: u32) -> usize {
    (mb as usize) << 20
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Budgets a job file may not give: no memtable, or sizes past 1 TiB
    /// (bytes given for MiB); the errors name the field.
    #[test]
    fn memory_budgets_out_of_range_are_refused_by_name() {
        let no_memtable = RocksDbMemory { write_buffer_mb: 0, ..RocksDbMemory::default() };
        assert!(no_memtable.validate().unwrap_err().contains("write_buffer_mb must be at least 1"));
        let bytes = RocksDbMemory { block_cache_mb: 64 << 20, ..RocksDbMemory::default() };
        let error = bytes.validate().unwrap_err();
        assert!(error.contains("block_cache_mb = 67108864 is more than 1048576 MiB"), "{error}");
        let off = RocksDbMemory { block_cache_mb: 0, hot_entries_mb: 0, ..RocksDbMemory::default() };
        assert_eq!(off.validate(), Ok(()), "no cache and no write-back layer are allowed");
    }
}
