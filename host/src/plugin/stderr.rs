//! A plugin's standard error: the last bytes it wrote, for error reports.
//!
//! A plugin may log as much as it likes over a long run; what matters when
//! it fails is its last lines (a panic message, usually). So the pipe keeps
//! a bounded tail and drops what came before, and a write never fails —
//! wasmtime's own memory pipe refuses writes once full, which turns a
//! chatty plugin's next `eprintln!` into a trap.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The newest `capacity` bytes written, shared by every handle.
#[derive(Clone)]
pub struct StderrTail {
    capacity: usize,
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl StderrTail {
    pub fn new(capacity: usize) -> Self {
        StderrTail { capacity, buffer: Arc::default() }
    }

    /// What the tail holds now.
    pub fn contents(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.buffer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `bytes`, dropping the oldest beyond the capacity (by halves,
    /// so that a stream of small writes does not move the tail each time).
    fn append(&self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(self.capacity)..];
        let mut buffer = self.lock();
        if buffer.len() + bytes.len() > self.capacity {
            let keep = (self.capacity / 2).saturating_sub(bytes.len()).min(buffer.len());
            let drop = buffer.len() - keep;
            buffer.drain(..drop);
        }
        buffer.extend_from_slice(bytes);
    }
}

impl OutputStream for StderrTail {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(self.capacity)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StderrTail {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        self.append(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_newest_bytes_and_never_refuses_a_write() {
        let mut tail = StderrTail::new(16);
        for line in ["first\n", "second\n", "third\n", "fourth\n"] {
            tail.write(line.as_bytes().to_vec().into()).unwrap();
        }
        let kept = String::from_utf8(tail.contents()).unwrap();
        assert!(kept.ends_with("third\nfourth\n") && kept.len() <= 16, "{kept:?}");
        tail.write(vec![b'x'; 100].into()).unwrap();
        assert_eq!(tail.contents(), vec![b'x'; 16], "a write larger than the tail keeps its end");
        assert_eq!(tail.check_write().unwrap(), 16, "always room");
    }
}
