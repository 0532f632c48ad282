//! The write-ahead log of a Kafka sink subtask: the records of one
//! checkpoint epoch, kept on local disk until their transaction commits.
//!
//! ```text
//! "WEIRKW02"
//! per record: key length u32 LE, key, value length u32 LE, value, timestamp i64 LE
//! "WEIRKEND", record count u64 LE, CRC-32 of the records' bytes u32 LE
//! ```
//!
//! The trailer is written when the epoch is pre-committed; a log without it
//! was cut short, and one whose checksum does not match was damaged: neither
//! is committed. (Version 1, still read, had no checksum.)

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::dataflow::RecordBatch;

const MAGIC: &[u8; 8] = b"WEIRKW02";
/// Logs written before the checksum.
const MAGIC_V1: &[u8; 8] = b"WEIRKW01";
const TRAILER: &[u8; 8] = b"WEIRKEND";

/// Appends the records of one epoch.
pub struct WalWriter {
    path: PathBuf,
    out: BufWriter<File>,
    records: u64,
    crc: crc32fast::Hasher,
}

impl WalWriter {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        out.write_all(MAGIC)?;
        Ok(WalWriter { path: path.to_path_buf(), out, records: 0, crc: crc32fast::Hasher::new() })
    }

    pub fn append(&mut self, batch: &RecordBatch) -> std::io::Result<()> {
        for record in batch.iter() {
            let parts: [&[u8]; 5] = [
                &(record.key.len() as u32).to_le_bytes(),
                record.key,
                &(record.value.len() as u32).to_le_bytes(),
                record.value,
                &record.timestamp.unwrap_or(i64::MIN).to_le_bytes(),
            ];
            for part in parts {
                self.out.write_all(part)?;
                self.crc.update(part);
            }
        }
        self.records += batch.len() as u64;
        Ok(())
    }

    /// Writes the trailer and syncs the file: the epoch is durable.
    pub fn seal(mut self) -> std::io::Result<PathBuf> {
        self.out.write_all(TRAILER)?;
        self.out.write_all(&self.records.to_le_bytes())?;
        self.out.write_all(&self.crc.clone().finalize().to_le_bytes())?;
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
    /// The checksum of what was read, for a log that has one.
    crc: Option<crc32fast::Hasher>,
    /// Bytes of the file not read yet: no length in it may exceed them.
    left: u64,
}

impl WalReader {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let size = file.metadata()?.len();
        let mut input = BufReader::with_capacity(1 << 16, file);
        let mut tag = [0u8; 8];
        let whole = input.read_exact(&mut tag);
        let reader = WalReader {
            path: path.to_path_buf(),
            input,
            record: WalRecord { key: Vec::new(), value: Vec::new(), timestamp: None },
            read: 0,
            crc: (&tag == MAGIC).then(crc32fast::Hasher::new),
            left: size.saturating_sub(8),
        };
        if whole.is_err() || (&tag != MAGIC && &tag != MAGIC_V1) {
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
                return Err(self.corrupt("damaged: a record's length is wrong"));
            }
            self.check_trailer()?;
            return Ok(None);
        }
        let key = self.length(word, "a key")?;
        read_bytes(&mut self.input, key, &mut self.record.key).map_err(|_| self.corrupt("cut short in a key"))?;
        self.input.read_exact(&mut word).map_err(|_| self.corrupt("cut short"))?;
        let value = self.length(word, "a value")?;
        read_bytes(&mut self.input, value, &mut self.record.value).map_err(|_| self.corrupt("cut short in a value"))?;
        let mut stamp = [0u8; 8];
        self.input.read_exact(&mut stamp).map_err(|_| self.corrupt("cut short"))?;
        // The bytes the writer hashed, in its order.
        if let Some(crc) = &mut self.crc {
            crc.update(&key.to_le_bytes());
            crc.update(&self.record.key);
            crc.update(&value.to_le_bytes());
            crc.update(&self.record.value);
            crc.update(&stamp);
        }
        self.left = self.left.saturating_sub(16 + u64::from(key) + u64::from(value));
        self.record.timestamp = Some(i64::from_le_bytes(stamp)).filter(|&t| t != i64::MIN);
        self.read += 1;
        Ok(Some(&self.record))
    }

    /// A length read from the log, if the rest of the file can hold it (a
    /// damaged one could ask for gigabytes).
    fn length(&self, word: [u8; 4], of: &str) -> std::io::Result<u32> {
        let length = u32::from_le_bytes(word);
        match u64::from(length) <= self.left {
            true => Ok(length),
            false => Err(self.corrupt(&format!("damaged: the length of {of} runs past the end of the file"))),
        }
    }

    /// The trailer's record count, and checksum if the log has one.
    fn check_trailer(&mut self) -> std::io::Result<()> {
        let mut count = [0u8; 8];
        self.input.read_exact(&mut count).map_err(|_| self.corrupt("cut short in the trailer"))?;
        if u64::from_le_bytes(count) != self.read {
            return Err(self.corrupt("damaged: the record count does not match the trailer"));
        }
        if let Some(crc) = self.crc.take() {
            let mut stored = [0u8; 4];
            self.input.read_exact(&mut stored).map_err(|_| self.corrupt("cut short in the trailer"))?;
            if u32::from_le_bytes(stored) != crc.finalize() {
                return Err(self.corrupt("damaged: its checksum does not match its records"));
            }
        }
        Ok(())
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

    /// Every record of `path` read, or the first error.
    fn read_all(path: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut reader = WalReader::open(path)?;
        let mut records = Vec::new();
        while let Some(record) = reader.next_record()? {
            records.push((record.key.clone(), record.value.clone()));
        }
        Ok(records)
    }

    #[test]
    fn a_damaged_log_is_refused_and_one_without_a_checksum_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epoch.wal");
        let mut wal = WalWriter::create(&path).unwrap();
        let mut batch = RecordBatch::new();
        batch.push(b"k", b"203", None);
        wal.append(&batch).unwrap();
        wal.seal().unwrap();
        let good = std::fs::read(&path).unwrap();
        assert_eq!(read_all(&path).unwrap(), [(b"k".to_vec(), b"203".to_vec())]);

        let mut flipped = good.clone();
        flipped[8 + 4 + 1 + 4] = b'3'; // "203" becomes "303"
        std::fs::write(&path, &flipped).unwrap();
        assert!(read_all(&path).unwrap_err().to_string().contains("checksum does not match"));

        let mut long = good.clone();
        long[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &long).unwrap();
        assert!(read_all(&path).unwrap_err().to_string().contains("runs past the end of the file"));

        // Version 1: the same records and trailer, without the checksum.
        let mut v1 = good[..good.len() - 4].to_vec();
        v1[..8].copy_from_slice(MAGIC_V1);
        std::fs::write(&path, &v1).unwrap();
        assert_eq!(read_all(&path).unwrap(), [(b"k".to_vec(), b"203".to_vec())]);
    }
}
