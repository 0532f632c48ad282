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

/// Reads a sealed log whole, checking its trailer.
pub fn read(path: &Path) -> std::io::Result<Vec<WalRecord>> {
    let mut input = BufReader::with_capacity(1 << 16, File::open(path)?);
    let corrupt = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
    let mut tag = [0u8; 8];
    input.read_exact(&mut tag)?;
    if &tag != MAGIC {
        return Err(corrupt("not a Weir Kafka write-ahead log"));
    }
    let mut records = Vec::new();
    loop {
        let mut word = [0u8; 4];
        input.read_exact(&mut word).map_err(|_| corrupt("cut short (no trailer)"))?;
        // A key length whose bytes spell the trailer's first half.
        if &word == b"WEIR" {
            let mut rest = [0u8; 4];
            input.read_exact(&mut rest).map_err(|_| corrupt("cut short"))?;
            if &rest == b"KEND" {
                let mut count = [0u8; 8];
                input.read_exact(&mut count).map_err(|_| corrupt("cut short in the trailer"))?;
                if u64::from_le_bytes(count) != records.len() as u64 {
                    return Err(corrupt("record count does not match the trailer"));
                }
                return Ok(records);
            }
            return Err(corrupt("bad record"));
        }
        let key = read_bytes(&mut input, u32::from_le_bytes(word)).map_err(|_| corrupt("cut short in a key"))?;
        input.read_exact(&mut word).map_err(|_| corrupt("cut short"))?;
        let value = read_bytes(&mut input, u32::from_le_bytes(word)).map_err(|_| corrupt("cut short in a value"))?;
        let mut stamp = [0u8; 8];
        input.read_exact(&mut stamp).map_err(|_| corrupt("cut short"))?;
        let timestamp = Some(i64::from_le_bytes(stamp)).filter(|&t| t != i64::MIN);
        records.push(WalRecord { key, value, timestamp });
    }
}

fn read_bytes(input: &mut impl Read, len: u32) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; len as usize];
    input.read_exact(&mut bytes)?;
    Ok(bytes)
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
        let records = read(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].key.as_slice(), records[0].value.as_slice(), records[0].timestamp), (&b"WEIR"[..], &b"v1"[..], Some(5)));
        assert_eq!(records[1].timestamp, None);

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 16]).unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("cut short"));
    }
}
