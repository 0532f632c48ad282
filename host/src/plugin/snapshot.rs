//! The part of an operator instance's snapshot that is not keyed entries:
//! the names of its states (so that restored ids mean the same states),
//! its broadcast maps, its timers and its watermark — one small file per
//! subtask.
//!
//! ```text
//! "WEIRMT01"
//! keyed state names:  u32 count, then each name (u32 len + UTF-8)
//! broadcast maps:     u32 count, then each: name, u32 entries, (key, value)...
//! timers:             u32 count, then each: domain u16 (0 event, 1 processing),
//!                     timestamp i64, key (u32 len + bytes)
//! watermark:          i64 (absent from files written before it was kept:
//!                     no watermark)
//! ```
//!
//! The watermark is kept so that a restored operator judges the events
//! replayed after its checkpoint against the event time it had reached,
//! as it did before: starting from no watermark, an event that was late
//! would be counted into a window that had fired (and a window that had
//! fired would take an update it never emits).

use std::path::Path;

use super::broadcast::BroadcastMaps;
use crate::state::{RecordReader, RecordWriter, StateError, StateRegistry, TimeDomain, TimerService};

const META_MAGIC: &[u8; 8] = b"WEIRMT01";

/// The non-keyed state of an operator instance.
#[derive(Debug)]
pub struct InstanceMeta {
    pub registry: StateRegistry,
    pub broadcast: BroadcastMaps,
    pub timers: TimerService,
    /// Its event-time watermark (`i64::MIN`: none yet).
    pub watermark: i64,
}

impl Default for InstanceMeta {
    fn default() -> Self {
        InstanceMeta {
            registry: StateRegistry::default(),
            broadcast: BroadcastMaps::default(),
            timers: TimerService::default(),
            watermark: i64::MIN,
        }
    }
}

/// Encodes an instance's state names, broadcast maps, timers and watermark.
pub fn encode(registry: &StateRegistry, broadcast: &BroadcastMaps, timers: &TimerService, watermark: i64) -> Vec<u8> {
    let mut out = RecordWriter::new(META_MAGIC);
    out.u32(registry.names().len() as u32);
    registry.names().iter().for_each(|name| out.bytes(name.as_bytes()));
    broadcast.encode(&mut out);
    out.u32(timers.len() as u32);
    for (domain, timestamp, key) in timers.unordered() {
        out.u16(match domain {
            TimeDomain::EventTime => 0,
            TimeDomain::ProcessingTime => 1,
        });
        out.i64(timestamp);
        out.bytes(key);
    }
    out.i64(watermark);
    out.into_bytes()
}

/// Decodes what [`encode`] wrote (already checked against its checksum).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<InstanceMeta, StateError> {
    let mut input = RecordReader::new(path, bytes, META_MAGIC)?;
    let names = (0..input.u32()?).map(|_| input.string()).collect::<Result<Vec<_>, _>>()?;
    let broadcast = BroadcastMaps::decode(&mut input)?;
    let mut timers = TimerService::default();
    for _ in 0..input.u32()? {
        let domain = if input.u16()? == 0 { TimeDomain::EventTime } else { TimeDomain::ProcessingTime };
        let timestamp = input.i64()?;
        timers.register(domain, timestamp, input.bytes()?);
    }
    let watermark = if input.is_empty() { i64::MIN } else { input.i64()? };
    Ok(InstanceMeta { registry: StateRegistry::with_names(names), broadcast, timers, watermark })
}
