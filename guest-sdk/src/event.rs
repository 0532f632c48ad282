//! Events as the operator sees them, and the flat buffers they travel in.

use crate::{Decode, Encode, Error};

/// The timestamp value that marks "no event timestamp" on the wire.
pub(crate) const NO_TIMESTAMP: i64 = i64::MIN;

/// One input event: a key, a value and an optional event timestamp, borrowed
/// from the batch the host delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub(crate) input: u32,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) timestamp: Option<i64>,
}

impl<'a> Event<'a> {
    /// The key's bytes; empty when the event is not keyed.
    #[inline]
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The value's bytes.
    #[inline]
    pub fn value(&self) -> &'a [u8] {
        self.value
    }

    /// The key as UTF-8 text.
    pub fn key_str(&self) -> Result<&'a str, Error> {
        std::str::from_utf8(self.key).map_err(|_| Error::input("expected a UTF-8 key"))
    }

    /// The value as UTF-8 text.
    pub fn value_str(&self) -> Result<&'a str, Error> {
        std::str::from_utf8(self.value).map_err(|_| Error::input("expected a UTF-8 value"))
    }

    /// The key decoded as `T` (see [`Decode`]).
    pub fn key_as<T: Decode>(&self) -> Result<T, Error> {
        T::decode(self.key)
    }

    /// The value decoded as `T` (see [`Decode`]).
    pub fn value_as<T: Decode>(&self) -> Result<T, Error> {
        T::decode(self.value)
    }

    /// The event timestamp in milliseconds since the epoch, if it has one.
    #[inline]
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// Which input the event arrived on: its position in the operator's
    /// `inputs` list in the job file (0 for single-input operators).
    #[inline]
    pub fn input(&self) -> u32 {
        self.input
    }
}

/// A batch received from the host, borrowed column-wise as the WIT
/// `input-batch` lays it out: event `i`'s key is
/// `data[offsets[2i]..offsets[2i + 1]]`, its value the next span;
/// `key_slots` numbers a keyed batch's keys by first appearance (empty for
/// an input that is not keyed).
pub struct BatchView<'a> {
    pub input: u32,
    pub data: &'a [u8],
    pub offsets: &'a [u32],
    pub timestamps: &'a [i64],
    pub key_slots: &'a [u32],
    pub watermark: i64,
    pub processing_time: i64,
}

impl<'a> BatchView<'a> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1) / 2
    }

    #[inline]
    pub(crate) fn is_keyed(&self) -> bool {
        !self.key_slots.is_empty()
    }

    /// Every event in order, or at the first whose offsets are outside the
    /// data an error (the host sent inconsistent offsets). An event ends
    /// where the next begins, so each reads two offsets, which the
    /// compiler knows are there: no per-event bounds checks on them.
    #[inline(always)]
    pub(crate) fn events(&self) -> impl Iterator<Item = Result<Event<'a>, Error>> + 'a {
        let (data, input, timestamps) = (self.data, self.input, self.timestamps);
        let first = self.offsets.first().map_or(0, |&at| at as usize);
        let ends = self.offsets.get(1..1 + 2 * self.len()).unwrap_or_default();
        ends.chunks_exact(2).enumerate().scan(first, move |start, (i, ends)| {
            let (key_end, value_end) = (ends[0] as usize, ends[1] as usize);
            let key = data.get(*start..key_end);
            let value = data.get(key_end..value_end);
            *start = value_end;
            let timestamp = timestamps.get(i).copied().filter(|t| *t != NO_TIMESTAMP);
            Some(match (key, value) {
                (Some(key), Some(value)) => Ok(Event { input, key, value, timestamp }),
                _ => Err(offsets_outside(i)),
            })
        })
    }
}

/// The error for event `i` whose offsets are outside its batch: out of
/// line, so that [`BatchView::events`], run per event, inlines without
/// the formatting.
#[cold]
#[inline(never)]
fn offsets_outside(i: usize) -> Error {
    Error::input(format!("event {i} has offsets outside its batch"))
}

/// Events being emitted, kept in the wire layout so that returning them to
/// the host is a move, not a conversion.
#[derive(Debug, Default)]
pub(crate) struct EventBuffer {
    pub data: Vec<u8>,
    pub offsets: Vec<u32>,
    pub timestamps: Vec<i64>,
    any_timestamp: bool,
}

impl EventBuffer {
    #[inline(always)]
    pub fn push(&mut self, key: impl Encode, value: impl Encode, timestamp: Option<i64>) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        key.encode(&mut self.data);
        self.offsets.push(self.data.len() as u32);
        value.encode(&mut self.data);
        self.offsets.push(self.data.len() as u32);
        self.any_timestamp |= timestamp.is_some();
        self.timestamps.push(timestamp.unwrap_or(NO_TIMESTAMP));
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.len() <= 1
    }

    /// Moves the buffered events out, leaving the buffer empty.
    ///
    /// The next call's buffers start with room for as much as this call's
    /// held, up to [`KEPT_ROOM_BYTES`] each: a call emits about as much as
    /// the one before, and growing from empty would reallocate and copy
    /// each buffer a dozen times per call. (The limit keeps a call with a
    /// huge output from doubling what the instance holds while it returns.)
    pub fn take(&mut self) -> (Vec<u8>, Vec<u32>, Vec<i64>) {
        let mut timestamps = take_keeping_room(&mut self.timestamps);
        if !std::mem::take(&mut self.any_timestamp) {
            timestamps.clear();
        }
        let mut offsets = take_keeping_room(&mut self.offsets);
        if offsets.is_empty() {
            offsets.push(0);
        }
        (take_keeping_room(&mut self.data), offsets, timestamps)
    }
}

/// The most room an output buffer keeps from one call to the next.
const KEPT_ROOM_BYTES: usize = 1 << 20;

/// Takes `buffer`'s contents, leaving it empty with room for as many (up
/// to [`KEPT_ROOM_BYTES`]).
fn take_keeping_room<T>(buffer: &mut Vec<T>) -> Vec<T> {
    let room = buffer.len().min(KEPT_ROOM_BYTES / size_of::<T>().max(1));
    std::mem::replace(buffer, Vec::with_capacity(room))
}

/// Emitted events grouped by output; index 0 is the main output.
#[derive(Debug)]
pub(crate) struct Outputs {
    buffers: Vec<(String, EventBuffer)>,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs { buffers: vec![(String::new(), EventBuffer::default())] }
    }
}

impl Outputs {
    #[inline]
    pub fn main(&mut self) -> &mut EventBuffer {
        &mut self.buffers[0].1
    }

    pub fn named(&mut self, output: &str) -> &mut EventBuffer {
        let index = match self.buffers.iter().position(|(name, _)| name == output) {
            Some(index) => index,
            None => {
                self.buffers.push((output.to_owned(), EventBuffer::default()));
                self.buffers.len() - 1
            }
        };
        &mut self.buffers[index].1
    }

    /// Drains every non-empty output.
    pub fn drain(&mut self) -> impl Iterator<Item = (String, (Vec<u8>, Vec<u32>, Vec<i64>))> + '_ {
        self.buffers
            .iter_mut()
            .filter(|(_, buffer)| !buffer.is_empty())
            .map(|(name, buffer)| (name.clone(), buffer.take()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(data: &'a [u8], offsets: &'a [u32], timestamps: &'a [i64]) -> BatchView<'a> {
        BatchView { input: 1, data, offsets, timestamps, key_slots: &[], watermark: 0, processing_time: 0 }
    }

    /// Each event's key and value lie between its offsets, its timestamp
    /// beside it; the first event whose offsets leave the data is an error.
    #[test]
    fn events_are_read_in_order_between_their_offsets() {
        let data = b"k1v1k22v";
        let timestamps = [5, NO_TIMESTAMP];
        let batch = view(data, &[0, 2, 4, 7, 8], &timestamps);
        let events: Vec<Event<'_>> = batch.events().map(Result::unwrap).collect();
        let expected = [
            Event { input: 1, key: b"k1", value: b"v1", timestamp: Some(5) },
            Event { input: 1, key: b"k22", value: b"v", timestamp: None },
        ];
        assert_eq!(events, expected);

        let bad = view(data, &[0, 2, 4, 9, 8], &[]);
        let results: Vec<Result<Event<'_>, Error>> = bad.events().collect();
        assert!(results[0].is_ok());
        let err = results[1].as_ref().err().expect("offsets past the data").to_string();
        assert!(err.contains("event 1 has offsets outside its batch"), "{err}");
        assert_eq!(view(b"", &[], &[]).events().count(), 0, "no offsets, no events");
    }

    /// Taken events leave a buffer with room for as many, up to the limit,
    /// and an empty one.
    #[test]
    fn taking_events_keeps_room_for_as_many_up_to_a_limit() {
        let mut buffer = EventBuffer::default();
        for i in 0..1000u64 {
            buffer.push(i, "value", Some(7));
        }
        let (data, offsets, timestamps) = buffer.take();
        assert_eq!((offsets.len(), timestamps.len()), (2001, 1000));
        assert!(buffer.is_empty());
        assert!(buffer.data.capacity() >= data.len() && buffer.offsets.capacity() >= offsets.len());
        assert!(buffer.timestamps.capacity() >= 1000);

        let mut big = vec![0u8; 3 * KEPT_ROOM_BYTES];
        let taken = take_keeping_room(&mut big);
        assert_eq!(taken.len(), 3 * KEPT_ROOM_BYTES);
        assert_eq!((big.len(), big.capacity()), (0, KEPT_ROOM_BYTES));
        let mut words = vec![0u64; KEPT_ROOM_BYTES];
        take_keeping_room(&mut words);
        assert_eq!(words.capacity(), KEPT_ROOM_BYTES / 8);
    }
}
