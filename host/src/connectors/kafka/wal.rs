//! The write-ahead log of a Kafka sink subtask: the records of one
//! checkpoint epoch, kept on local disk until their transaction commits.
//!
//! ```text
//! "WEIRKW01"
//! per record: key length u32 LE, key, value length u32 LE, value, timestamp i64 LE
//! "WEIRKEND", record count u64 LE
//! ```
//!
//! The trailer is written when the epoch is pre-committed; a log without it
//! was cut short and is never committed.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::dataflow::RecordBatch;

const MAGIC: &[u8; 8] = b"WEIRKW01";
const TRAILER: &[u8; 8] = b"WEIRKEND";

/// Appends the records of one epoch.
pub struct WalWriter {
    path: PathBuf,
    out: BufWriter<File>,
    records: u64,
}

impl WalWriter {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        out.write_all(MAGIC)?;
        Ok(WalWriter { path: path.to_path_buf(), out, records: 0 })
    }

    pub fn append(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        for record in batch.iter() {
            self.out.write_all(&(record.key.len() as u32).to_le_bytes())?;
            self.out.write_all(record.key)?;
            self.out.write_all(&(record.value.len() as u32).to_le_bytes())?;
            self.out.write_all(record.value)?;
            self.out.write_all(&record.timestamp.unwrap_or(i64::MIN).to_le_bytes())?;
        }
        self.records += batch.len() as u64;
        Ok(())
    }

    /// Writes the trailer and syncs the file: the epoch is durable.
    pub fn seal(mut self) -> std::io::Result<PathBuf> {
        self.out.write_all(TRAILER)?;
        self.out.write_all(&self.records.to_le_bytes())?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(self.path)
    }
}

/// One logged record.
#[derive(Debug)]
pub struct WalRecord {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub timestamp: Option<i64>,
}

/// Reads a sealed log record by record, in constant memory; the trailer's
/// count is checked when the last record has been read.
pub struct WalReader {
    path: PathBuf,
    input: BufReader<File>,
    record: WalRecord,
    read: u64,
}

impl WalReader {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let mut input = BufReader::with_capacity(1 << 16, File::open(path)?);
        let mut tag = [0u8; 8];
        input.read_exact(&mut tag)?;
        let reader = WalReader {
            path: path.to_path_buf(),
            input,
            record: WalRecord { key: Vec::new(), value: Vec::new(), timestamp: None },
            read: 0,
        };
        if &tag != MAGIC {
            return Err(reader.corrupt("not a Weir Kafka write-ahead log"));
        }
        Ok(reader)
    }

    fn corrupt(&self, what: &str) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", self.path.display()))
    }

    /// The next record (reusing its buffers), or `None` at the trailer.
    pub fn next_record(&mut self) -> std::io::Result<Option<&WalRecord>> {
        let mut word = [0u8; 4];
        self.input.read_exact(&mut word).map_err(|_| self.corrupt("cut short (no trailer)"))?;
        // A key length whose bytes spell the trailer's first half.
        if &word == b"WEIR" {
            let mut rest = [0u8; 4];
            self.input.read_exact(&mut rest).map_err(|_| self.corrupt("cut short"))?;
            if &rest != b"KEND" {
                return Err(self.corrupt("bad record"));
            }
            let mut count = [0u8; 8];
            self.input.read_exact(&mut count).map_err(|_| self.corrupt("cut short in the trailer"))?;
            if u64::from_le_bytes(count) != self.read {
                return Err(self.corrupt("record count does not match the trailer"));
            }
            return Ok(None);
        }
        read_bytes(&mut self.input, u32::from_le_bytes(word), &mut self.record.key)
            .map_err(|_| self.corrupt("cut short in a key"))?;
        self.input.read_exact(&mut word).map_err(|_| self.corrupt("cut short"))?;
        read_bytes(&mut self.input, u32::from_le_bytes(word), &mut self.record.value)
            .map_err(|_| self.corrupt("cut short in a value"))?;
        let mut stamp = [0u8; 8];
        self.input.read_exact(&mut stamp).map_err(|_| self.corrupt("cut short"))?;
        self.record.timestamp = Some(i64::from_le_bytes(stamp)).filter(|&t| t != i64::MIN);
        self.read += 1;
        Ok(Some(&self.record))
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.read
    }
}

fn read_bytes(input: &mut impl Read, len: u32, into: &mut Vec<u8>) -> std::io::Result<()> {
    into.resize(len as usize, 0);
    input.read_exact(into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_log_reads_back_and_a_cut_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epoch.wal");
        let mut wal = WalWriter::create(&path).unwrap();
        let mut batch = RecordBatch::new();
        batch.push(b"WEIR", b"v1", Some(5));
        batch.push(b"", b"", None);
        wal.append(&batch).unwrap();
        wal.seal().unwrap();
        let mut reader = WalReader::open(&path).unwrap();
        let first = reader.next_record().unwrap().unwrap();
        assert_eq!((first.key.as_slice(), first.value.as_slice(), first.timestamp), (&b"WEIR"[..], &b"v1"[..], Some(5)));
        assert_eq!(reader.next_record().unwrap().unwrap().timestamp, None);
        assert!(reader.next_record().unwrap().is_none(), "the trailer");
        assert_eq!(reader.records(), 2);

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 16]).unwrap();
        let mut reader = WalReader::open(&path).unwrap();
        let error = std::iter::from_fn(|| Some(reader.next_record().map(|r| r.is_some()))).find(|r| !matches!(r, Ok(true)));
        assert!(error.unwrap().unwrap_err().to_string().contains("cut short"));
    }
}
