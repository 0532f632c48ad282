//! The file source: text lines or JSON lines, read by one subtask.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::pace::Pace;
use super::{Backlog, ConnectorError, Poll, Source, SourceSplit};
use crate::dataflow::RecordBatch;
use crate::job::FileFormat;

/// The longest line a file source reads (an event's key and value).
const MAX_LINE_BYTES: u64 = 64 << 20;

/// Reads a file line by line. Its position is the byte offset of the next
/// line, so a checkpoint can record it and a restore can seek to it.
pub struct FileSource {
    path: PathBuf,
    format: FileFormat,
    reader: BufReader<File>,
    line: String,
    offset: u64,
    /// This subtask reads nothing (restored without the file's split).
    done: bool,
    pace: Pace,
}

impl FileSource {
    /// Opens `path` to read from byte `offset` on (`None`: nothing to read —
    /// a restored subtask that was given no split).
    pub fn open(path: &Path, format: FileFormat, offset: Option<u64>) -> Result<Self, ConnectorError> {
        let file = File::open(path).map_err(|source| ConnectorError::Open { path: path.into(), source })?;
        let mut source = FileSource {
            path: path.into(),
            format,
            reader: BufReader::with_capacity(1 << 16, file),
            line: String::new(),
            offset: 0,
            done: offset.is_none(),
            pace: Pace::new(None),
        };
        if let Some(offset) = offset.filter(|&o| o > 0) {
            source.check_restored_offset(offset)?;
            source.seek(offset)?;
        }
        Ok(source)
    }

    /// Reads no more than `rate` lines per second.
    pub fn with_rate(mut self, rate: Option<f64>) -> Self {
        self.pace = Pace::new(rate);
        self
    }

    /// A restored position must lie in the file at the start of a line: a
    /// file cut shorter, or replaced by another, would be read from the
    /// middle of a line — or not at all — without a word.
    fn check_restored_offset(&mut self, offset: u64) -> Result<(), ConnectorError> {
        let size = self.reader.get_ref().metadata().map_err(|e| self.io_error(e))?.len();
        let problem = if offset > size {
            Some(format!("it has {size} bytes, fewer than the {offset} already read"))
        } else if offset < size && !self.newline_before(offset)? {
            Some(format!("byte {offset}, where reading goes on, is not the start of a line"))
        } else {
            None
        };
        match problem {
            Some(problem) => Err(ConnectorError::Restore(format!(
                "file {} is not the one the checkpoint or savepoint read: {problem} — was it replaced or cut? Put \
                 the file back as it was, or start the job afresh (a new checkpoint_dir) to read it from the start",
                self.path.display()
            ))),
            None => Ok(()),
        }
    }

    /// Whether the byte before `offset` (above 0) ends a line; the reader
    /// is at `offset` after.
    fn newline_before(&mut self, offset: u64) -> Result<bool, ConnectorError> {
        self.seek(offset - 1)?;
        let mut byte = [0u8];
        self.reader.read_exact(&mut byte).map_err(|e| self.io_error(e))?;
        self.offset = offset;
        Ok(byte[0] == b'\n')
    }

    /// Whether nothing is left to read, as the file is now.
    fn at_end(&mut self) -> Result<bool, ConnectorError> {
        match self.reader.fill_buf() {
            Ok(buffered) => Ok(buffered.is_empty()),
            Err(error) => Err(self.io_error(error)),
        }
    }

    fn seek(&mut self, position: u64) -> Result<(), ConnectorError> {
        use std::io::Seek;
        self.reader.seek(std::io::SeekFrom::Start(position)).map_err(|e| self.io_error(e))?;
        self.offset = position;
        Ok(())
    }

    /// An I/O error on the file.
    fn io_error(&self, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io { what: self.path.display().to_string(), source }
    }

    /// The number (from 1) of the line that starts at byte `start`. Only an
    /// error names a line, so the newlines before it are counted then: a
    /// restored source starts mid-file and cannot count them as it reads.
    fn line_number_at(&self, start: u64) -> u64 {
        let count = || -> std::io::Result<u64> {
            let mut before = File::open(&self.path)?.take(start);
            let (mut buffer, mut newlines) = (vec![0; 1 << 16], 0);
            loop {
                match before.read(&mut buffer)? {
                    0 => return Ok(newlines + 1),
                    n => newlines += buffer[..n].iter().filter(|&&b| b == b'\n').count() as u64,
                }
            }
        };
        count().unwrap_or(0)
    }

    /// Adds the line just read, which started at byte `start`.
    fn push_line(&self, batch: &mut RecordBatch, start: u64) -> Result<(), ConnectorError> {
        let line = self.line.strip_suffix('\n').unwrap_or(&self.line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        match self.format {
            FileFormat::Text => batch.push(b"", line.as_bytes(), None),
            FileFormat::Json if line.trim().is_empty() => {}
            FileFormat::Json => {
                let (key, value, timestamp) = parse_json_line(line).map_err(|message| ConnectorError::BadLine {
                    path: self.path.clone(),
                    line: self.line_number_at(start),
                    message,
                })?;
                batch.push(&key, &value, timestamp);
            }
        }
        Ok(())
    }
}

impl Source for FileSource {
    /// The file is one split; its position is the byte offset of the next line.
    fn splits(&self) -> Vec<SourceSplit> {
        if self.done {
            return Vec::new();
        }
        vec![SourceSplit { id: 0, next: self.offset, end: None, shape: 0 }]
    }

    fn resume(&mut self) {
        self.pace.restart();
    }

    /// The bytes after its position, in the file as it is now.
    fn backlog(&self) -> Option<Backlog> {
        let size = if self.done { self.offset } else { self.reader.get_ref().metadata().ok()?.len() };
        Some(Backlog::bytes(size.saturating_sub(self.offset)))
    }

    fn poll(&mut self, batch: &mut RecordBatch, max: usize) -> Result<Poll, ConnectorError> {
        if self.done {
            return Ok(Poll::Exhausted);
        }
        let allowed = self.pace.allowance(max);
        if allowed == 0 && self.at_end()? {
            // Ended now, not once the rate would allow another line.
            return Ok(Poll::Exhausted);
        }
        for _ in 0..allowed {
            self.line.clear();
            // At most one byte past the longest line: a file without
            // newlines (`/dev/zero`) must not be read into memory whole.
            let mut bounded = (&mut self.reader).take(MAX_LINE_BYTES + 1);
            let read = bounded.read_line(&mut self.line).map_err(|source| match source.kind() {
                std::io::ErrorKind::InvalidData => ConnectorError::BadLine {
                    path: self.path.clone(),
                    line: self.line_number_at(self.offset),
                    message: "not UTF-8 text; a file source reads UTF-8 lines".into(),
                },
                _ => self.io_error(source),
            })?;
            if read == 0 {
                return Ok(if batch.is_empty() { Poll::Exhausted } else { Poll::Ready });
            }
            if read as u64 > MAX_LINE_BYTES {
                return Err(ConnectorError::BadLine {
                    path: self.path.clone(),
                    line: self.line_number_at(self.offset),
                    message: format!(
                        "longer than {} MiB; a file source reads lines of text (is it a text file, with newlines?)",
                        MAX_LINE_BYTES >> 20
                    ),
                });
            }
            self.pace.took(1);
            let start = self.offset;
            self.offset += read as u64;
            self.push_line(batch, start)?;
            if batch.is_full(max) {
                break;
            }
        }
        Ok(Poll::Ready)
    }
}

/// `{"key": …, "value": …, "timestamp": ms}` → (key, value, timestamp).
fn parse_json_line(line: &str) -> Result<(Vec<u8>, Vec<u8>, Option<i64>), String> {
    const EXPECTED: &str = r#"each line must be a JSON object like {"key": "k", "value": "v", "timestamp": 1000}"#;
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e}); {EXPECTED}"))?;
    let Value::Object(mut object) = value else {
        return Err(format!("not a JSON object; {EXPECTED}"));
    };
    if let Some(unknown) = object.keys().find(|k| !matches!(k.as_str(), "key" | "value" | "timestamp")) {
        return Err(format!("unknown field `{unknown}`; {EXPECTED}"));
    }
    let bytes = |v: Option<Value>| match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.into_bytes(),
        Some(other) => other.to_string().into_bytes(),
    };
    let timestamp = match object.remove("timestamp") {
        None | Some(Value::Null) => None,
        // The least i64 is how a batch marks "no timestamp".
        Some(Value::Number(n)) if n.as_i64().is_some_and(|t| t != crate::dataflow::NO_TIMESTAMP) => n.as_i64(),
        Some(Value::Number(n)) if n.is_i64() => return Err(format!("timestamp {n} is out of range: give one above it, or none")),
        Some(Value::Number(n)) if n.is_u64() => {
            return Err(format!("timestamp {n} is out of range: milliseconds since 1970 fit in a signed 64-bit integer"));
        }
        Some(Value::Number(n)) => Some(float_timestamp(&n)?),
        Some(other) => return Err(format!("timestamp {other} is not a number of milliseconds")),
    };
    Ok((bytes(object.remove("key")), bytes(object.remove("value")), timestamp))
}

/// A timestamp written as a float (`1000.0`, `1e3`): taken when it is
/// whole and exact (below 2^53 ms, about 285 000 years).
fn float_timestamp(n: &serde_json::Number) -> Result<i64, String> {
    let ms = n.as_f64().unwrap_or(f64::NAN);
    if ms.fract() != 0.0 {
        return Err(format!("timestamp {n} is not a whole number of milliseconds"));
    }
    if ms.abs() >= 2f64.powi(53) {
        return Err(format!("timestamp {n} is too large to be exact as a float: write it as an integer"));
    }
    Ok(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restored position in a file since cut shorter, or replaced so that
    /// it falls mid-line, is refused: it was read from there without a word.
    #[test]
    fn a_restored_position_the_file_no_longer_has_is_refused() {
        let path = std::env::temp_dir().join(format!("weir-restored-{}.txt", std::process::id()));
        std::fs::write(&path, "first\nsecond\n").unwrap();
        assert!(FileSource::open(&path, FileFormat::Text, Some(6)).is_ok(), "the start of the second line");
        let mid_line = FileSource::open(&path, FileFormat::Text, Some(4)).err().unwrap().to_string();
        assert!(mid_line.contains("byte 4, where reading goes on, is not the start of a line"), "{mid_line}");
        std::fs::write(&path, "first\n").unwrap();
        assert!(FileSource::open(&path, FileFormat::Text, Some(6)).is_ok(), "at its end: nothing more to read");
        let shorter = FileSource::open(&path, FileFormat::Text, Some(13)).err().unwrap().to_string();
        assert!(shorter.contains("it has 6 bytes, fewer than the 13 already read") && shorter.contains("replaced or cut"), "{shorter}");
        std::fs::write(&path, "first\nlast, without a newline").unwrap();
        assert!(FileSource::open(&path, FileFormat::Text, Some(29)).is_ok(), "read to its end");
        std::fs::remove_file(&path).unwrap();
    }

    /// A slowly paced file shows its first line at once and ends with its
    /// last: neither waits an interval of the rate (4 s here).
    #[test]
    fn a_paced_file_reads_its_first_line_at_once_and_ends_with_its_last() {
        let path = std::env::temp_dir().join(format!("weir-paced-{}.txt", std::process::id()));
        std::fs::write(&path, "only line\n").unwrap();
        let mut source = FileSource::open(&path, FileFormat::Text, Some(0)).unwrap().with_rate(Some(0.25));
        let mut batch = RecordBatch::new();
        assert_eq!(source.poll(&mut batch, 100).unwrap(), Poll::Ready);
        assert_eq!(batch.len(), 1, "the first line at once");
        let mut after = RecordBatch::new();
        assert_eq!(source.poll(&mut after, 100).unwrap(), Poll::Exhausted, "the end at once");
        assert_eq!(source.splits()[0].next, 10, "ended at the end of the file");
        std::fs::remove_file(&path).unwrap();
    }

    /// A file without newlines is refused at its longest line, not read
    /// into memory whole.
    #[test]
    fn a_file_without_newlines_is_refused_at_the_longest_line() {
        let mut source = FileSource::open(Path::new("/dev/zero"), FileFormat::Text, Some(0)).unwrap();
        let error = source.poll(&mut RecordBatch::new(), 100).unwrap_err().to_string();
        assert!(error.contains("longer than 64 MiB") && error.contains("/dev/zero:1:"), "{error}");
    }

    #[test]
    fn whole_timestamps_written_as_floats_are_taken() {
        for (text, expected) in [("1000.0", 1000), ("1e3", 1000), ("-0", 0), ("-0.0", 0), ("-2.5e3", -2500)] {
            let line = format!(r#"{{"value":1,"timestamp":{text}}}"#);
            assert_eq!(parse_json_line(&line).unwrap().2, Some(expected), "{text}");
        }
        let refused = |text: &str| parse_json_line(&format!(r#"{{"value":1,"timestamp":{text}}}"#)).unwrap_err();
        assert!(refused("1000.5").contains("timestamp 1000.5 is not a whole number of milliseconds"), "{}", refused("1000.5"));
        assert!(refused("1e300").contains("too large to be exact as a float"), "{}", refused("1e300"));
        assert!(refused(r#""1000""#).contains("is not a number of milliseconds"), "{}", refused(r#""1000""#));
    }

    #[test]
    fn json_lines_take_strings_as_text_and_other_values_as_json() {
        let (k, v, t) = parse_json_line(r#"{"key":"a","value":{"x":1},"timestamp":5}"#).unwrap();
        assert_eq!((k.as_slice(), v.as_slice(), t), (&b"a"[..], &br#"{"x":1}"#[..], Some(5)));
        let (k, v, t) = parse_json_line(r#"{"value":3}"#).unwrap();
        assert_eq!((k.as_slice(), v.as_slice(), t), (&b""[..], &b"3"[..], None));
    }

    #[test]
    fn bad_json_lines_say_what_is_expected() {
        assert!(parse_json_line("[1]").unwrap_err().contains("not a JSON object"));
        assert!(parse_json_line("{").unwrap_err().contains("not JSON"));
        assert!(parse_json_line(r#"{"vaule":1}"#).unwrap_err().contains("unknown field `vaule`"));
        assert!(parse_json_line(r#"{"timestamp":"x"}"#).unwrap_err().contains("is not a number of milliseconds"));
        assert!(parse_json_line(r#"{"timestamp":-9223372036854775808}"#).unwrap_err().contains("out of range"));
        let error = parse_json_line(r#"{"timestamp":9223372036854775808}"#).unwrap_err();
        assert!(error.contains("timestamp 9223372036854775808 is out of range: milliseconds since 1970 fit"), "{error}");
        assert_eq!(parse_json_line(r#"{"timestamp":-9223372036854775807}"#).unwrap().2, Some(i64::MIN + 1));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named_by_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, b"fine\nbad \xff\xfe\n").unwrap();
        let mut source = FileSource::open(&path, FileFormat::Text, Some(0)).unwrap();
        let error = source.poll(&mut RecordBatch::new(), 10).unwrap_err().to_string();
        assert!(error.ends_with("in.txt:2: not UTF-8 text; a file source reads UTF-8 lines"), "{error}");
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_in_the_file_after_a_restore_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"value\":1}\n{\"value\":2}\n\n{\"value\":3}\n{oops\n").unwrap();
        for offset in [0, 12, 25] {
            let mut source = FileSource::open(&path, FileFormat::Json, Some(offset)).unwrap();
            let error = source.poll(&mut RecordBatch::new(), 10).unwrap_err().to_string();
            assert!(error.contains("in.jsonl:5: not JSON"), "from byte {offset}: {error}");
        }
    }

    #[test]
    fn reads_lines_and_tracks_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "one\r\ntwo\nthree").unwrap();
        let mut source = FileSource::open(&path, FileFormat::Text, Some(0)).unwrap();
        let mut batch = RecordBatch::new();
        assert_eq!(source.poll(&mut batch, 2).unwrap(), Poll::Ready);
        assert_eq!(source.splits(), [SourceSplit { id: 0, next: 9, end: None, shape: 0 }]);
        assert_eq!(source.poll(&mut batch, 2).unwrap(), Poll::Ready);
        assert_eq!(source.poll(&mut RecordBatch::new(), 2).unwrap(), Poll::Exhausted);
        let values: Vec<&[u8]> = batch.iter().map(|r| r.value).collect();
        assert_eq!(values, [&b"one"[..], b"two", b"three"]);
        assert_eq!(source.backlog(), Some(Backlog::bytes(0)), "read to the end");
        let mut resumed = FileSource::open(&path, FileFormat::Text, Some(9)).unwrap();
        assert_eq!(resumed.backlog(), Some(Backlog::bytes(5)), "from byte 9 of 14");
        let mut rest = RecordBatch::new();
        resumed.poll(&mut rest, 10).unwrap();
        assert_eq!(rest.iter().map(|r| r.value).collect::<Vec<_>>(), [&b"three"[..]]);
        let mut empty = FileSource::open(&path, FileFormat::Text, None).unwrap();
        assert_eq!(empty.poll(&mut RecordBatch::new(), 10).unwrap(), Poll::Exhausted);
        assert!(empty.splits().is_empty());
    }
}
