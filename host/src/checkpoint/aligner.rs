//! Barrier alignment for a subtask with several input channels.
//!
//! Barrier `n` splits every channel into what belongs to checkpoint `n`
//! and what comes after. Once a channel has delivered barrier `n`, its
//! later messages are held back (they belong after the snapshot) until
//! every other channel has delivered `n` too or ended; then the subtask
//! snapshots, and the held messages are replayed in their order.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::dataflow::{Envelope, Message};

/// What the subtask should do next.
pub enum Aligned {
    /// Process this message.
    Message(Envelope),
    /// Every channel has delivered barrier `checkpoint`: snapshot now.
    Barrier { checkpoint: u64, alignment: Duration },
}

/// Tracks the barriers of one subtask's input channels.
pub struct BarrierAligner {
    /// The checkpoint being aligned and when its first barrier came.
    current: Option<(u64, Instant)>,
    arrived: Vec<bool>,
    ended: Vec<bool>,
    held: VecDeque<Envelope>,
    replay: VecDeque<Envelope>,
}

impl BarrierAligner {
    pub fn new(channels: usize) -> Self {
        BarrierAligner {
            current: None,
            arrived: vec![false; channels],
            ended: vec![false; channels],
            held: VecDeque::new(),
            replay: VecDeque::new(),
        }
    }

    /// A message held back earlier that may now go on, if any: take it
    /// before reading the inbox again.
    pub fn replayed(&mut self) -> Option<Envelope> {
        self.replay.pop_front()
    }

    fn blocked(&self, channel: usize) -> bool {
        self.current.is_some() && self.arrived[channel]
    }

    /// Accepts the next message; `None` when it was held back or was a
    /// barrier that does not complete alignment yet.
    pub fn accept(&mut self, envelope: Envelope) -> Option<Aligned> {
        let channel = envelope.channel as usize;
        if self.blocked(channel) {
            self.held.push_back(envelope);
            return None;
        }
        match envelope.message {
            Message::Barrier(checkpoint) => self.barrier(channel, checkpoint),
            Message::End => {
                self.ended[channel] = true;
                match self.complete() {
                    Some(aligned) => {
                        // The channel ended before its barrier: all its
                        // records are in the snapshot. Count the end after.
                        self.replay.push_front(envelope);
                        Some(aligned)
                    }
                    None => Some(Aligned::Message(envelope)),
                }
            }
            _ => Some(Aligned::Message(envelope)),
        }
    }

    fn barrier(&mut self, channel: usize, checkpoint: u64) -> Option<Aligned> {
        match self.current {
            Some((current, _)) if checkpoint < current => return None, // Of an abandoned checkpoint.
            Some((current, _)) if checkpoint > current => self.release(), // `current` was abandoned.
            _ => {}
        }
        if self.current.is_none() {
            self.current = Some((checkpoint, Instant::now()));
        }
        self.arrived[channel] = true;
        self.complete()
    }

    /// Completes alignment if every channel has delivered the barrier or ended.
    fn complete(&mut self) -> Option<Aligned> {
        let (checkpoint, started) = self.current?;
        if !self.arrived.iter().zip(&self.ended).all(|(&arrived, &ended)| arrived || ended) {
            return None;
        }
        self.release();
        Some(Aligned::Barrier { checkpoint, alignment: started.elapsed() })
    }

    /// Ends the current alignment: held messages go first in the replay.
    fn release(&mut self) {
        self.current = None;
        self.arrived.iter_mut().for_each(|a| *a = false);
        let mut held = std::mem::take(&mut self.held);
        held.extend(self.replay.drain(..));
        self.replay = held;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::RecordBatch;

    fn batch(channel: u32, value: &str) -> Envelope {
        let mut batch = RecordBatch::new();
        batch.push(b"", value.as_bytes(), None);
        Envelope { input: 0, channel, message: Message::Batch(batch) }
    }

    fn barrier(channel: u32, n: u64) -> Envelope {
        Envelope { input: 0, channel, message: Message::Barrier(n) }
    }

    fn describe(aligned: Option<Aligned>) -> String {
        match aligned {
            None => "-".into(),
            Some(Aligned::Barrier { checkpoint, .. }) => format!("snapshot {checkpoint}"),
            Some(Aligned::Message(Envelope { message: Message::Batch(b), .. })) => {
                String::from_utf8(b.get(0).value.to_vec()).unwrap()
            }
            Some(Aligned::Message(Envelope { message: Message::End, channel, .. })) => format!("end {channel}"),
            Some(Aligned::Message(_)) => "other".into(),
        }
    }

    /// Feeds messages as the inbox would, replaying held ones first.
    fn run(aligner: &mut BarrierAligner, inbox: Vec<Envelope>) -> Vec<String> {
        let mut inbox = VecDeque::from(inbox);
        let mut out = Vec::new();
        while let Some(envelope) = aligner.replayed().or_else(|| inbox.pop_front()) {
            let step = describe(aligner.accept(envelope));
            if step != "-" {
                out.push(step);
            }
        }
        out
    }

    #[test]
    fn records_after_a_barrier_wait_for_the_other_channels() {
        let mut aligner = BarrierAligner::new(2);
        let steps = run(
            &mut aligner,
            vec![batch(0, "a1"), barrier(0, 1), batch(0, "a2"), batch(1, "b1"), barrier(1, 1), batch(1, "b2")],
        );
        assert_eq!(steps, ["a1", "b1", "snapshot 1", "a2", "b2"]);
    }

    #[test]
    fn an_ended_channel_does_not_block_alignment() {
        let mut aligner = BarrierAligner::new(2);
        let steps = run(&mut aligner, vec![barrier(0, 1), batch(0, "a2"), batch(1, "b1"), Envelope {
            input: 0,
            channel: 1,
            message: Message::End,
        }]);
        assert_eq!(steps, ["b1", "snapshot 1", "end 1", "a2"]);
    }

    #[test]
    fn a_newer_barrier_abandons_the_older_alignment() {
        let mut aligner = BarrierAligner::new(2);
        let steps = run(&mut aligner, vec![barrier(0, 1), batch(0, "a"), barrier(1, 2), barrier(0, 2), batch(1, "b")]);
        assert_eq!(steps, ["a", "snapshot 2", "b"]);
    }
}
