//! Sinks that write one line per event (stdout, file) and one that discards.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{ConnectorError, DirectoryLock, Sink};
use crate::dataflow::{Record, RecordBatch};
use crate::job::OutputFormat;

/// How long written lines may wait in the buffer: a slow stream shows up
/// as it comes, and an interrupted run loses at most this much.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Writes events as lines to stdout or a file.
pub struct LineSink {
    what: String,
    format: OutputFormat,
    out: Box<dyn Write + Send>,
    line: Vec<u8>,
    flushed: Instant,
}

impl LineSink {
    pub fn stdout(format: OutputFormat) -> Self {
        LineSink::new("stdout".into(), format, Box::new(BufWriter::new(std::io::stdout())))
    }

    /// Creates the file at `path`, and its directory: empty for a job that
    /// starts afresh, appended to by one that resumes (which repeats what
    /// followed its checkpoint, but loses nothing written before).
    pub fn file(path: &Path, format: OutputFormat, resumed: bool) -> Result<Self, ConnectorError> {
        let open_error = |source| ConnectorError::Open { path: PathBuf::from(path), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::dirs::create(dir).map_err(open_error)?;
        }
        let file = File::options().create(true).write(true).append(resumed).truncate(!resumed).open(path);
        let file = file.map_err(open_error)?;
        Ok(LineSink::new(path.display().to_string(), format, Box::new(BufWriter::with_capacity(1 << 16, file))))
    }

    fn new(what: String, format: OutputFormat, out: Box<dyn Write + Send>) -> Self {
        LineSink { what, format, out, line: Vec::new(), flushed: Instant::now() }
    }

    fn io_error(&self, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io { what: self.what.clone(), source }
    }
}

/// Locks a `file` sink's file (creating it, and its directory, without
/// changing what it holds) for one run of one job: a second job writing
/// it, in this host or another, is refused instead of mixing its lines in.
pub fn lock_file(path: &Path) -> Result<DirectoryLock, ConnectorError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::dirs::create(dir).map_err(|source| ConnectorError::Open { path: PathBuf::from(path), source })?;
    }
    DirectoryLock::take(path, path, ConnectorError::FileInUse { path: path.into() })
}

/// Appends `record` to `line` in `format`, with a newline.
pub fn format_line(record: &Record<'_>, format: OutputFormat, line: &mut Vec<u8>) {
    match format {
        OutputFormat::Kv => {
            line.extend_from_slice(record.key);
            line.push(b'\t');
            line.extend_from_slice(record.value);
        }
        OutputFormat::Value => line.extend_from_slice(record.value),
        OutputFormat::Json => {
            let object = serde_json::json!({
                "key": String::from_utf8_lossy(record.key),
                "value": String::from_utf8_lossy(record.value),
                "timestamp": record.timestamp,
            });
            line.extend_from_slice(object.to_string().as_bytes());
        }
    }
    line.push(b'\n');
}

impl Sink for LineSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        self.line.clear();
        for record in batch.iter() {
            format_line(&record, self.format, &mut self.line);
        }
        let result = self.out.write_all(&self.line);
        result.map_err(|e| self.io_error(e))?;
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.flushed = Instant::now();
        let result = self.out.flush();
        result.map_err(|e| self.io_error(e))
    }
}

/// Counts events and drops them, optionally no faster than a rate.
#[derive(Debug)]
pub struct DiscardSink {
    pub count: u64,
    rate: Option<f64>,
    started: Instant,
    cancel: crate::dataflow::Cancel,
}

impl DiscardSink {
    pub fn new(rate: Option<f64>) -> Self {
        DiscardSink { count: 0, rate, started: Instant::now(), cancel: Default::default() }
    }
}

impl Sink for DiscardSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        self.count += batch.len() as u64;
        if let Some(rate) = self.rate {
            // Sleep until the events taken so far are due at `rate`.
            // A rate so low that the next event is due beyond what a
            // `Duration` holds waits until the job is cancelled.
            let due = Duration::try_from_secs_f64(self.count as f64 / rate).unwrap_or(Duration::MAX);
            // In slices: a batch at a low rate is a long wait, which a
            // cancel of the job ends.
            while let Some(wait) = due.checked_sub(self.started.elapsed()).filter(|w| !w.is_zero()) {
                if self.cancel.is_cancelled() {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(50)));
            }
        }
        Ok(())
    }

    fn watch_cancel(&mut self, cancel: crate::dataflow::Cancel) {
        self.cancel = cancel;
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}
