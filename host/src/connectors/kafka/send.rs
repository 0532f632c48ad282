//! Sending records through a producer whose queue may be full: shared by
//! the transactional commits and the at-least-once sink.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

/// Why a record was not sent.
pub(super) enum SendError<E> {
    Kafka(KafkaError),
    /// `waiting` gave up while the queue was full.
    GaveUp(E),
}

/// A record of `topic`, with its event time if it has one.
pub(super) fn record<'a>(topic: &'a str, key: &'a [u8], value: &'a [u8], timestamp: Option<i64>) -> BaseRecord<'a, [u8], [u8]> {
    let out = BaseRecord::to(topic).key(key).payload(value);
    match timestamp {
        Some(timestamp) => out.timestamp(timestamp),
        None => out,
    }
}

/// Sends `record`. While the producer's queue is full it serves the
/// producer's events (deliveries make room) and asks `waiting` whether to
/// go on.
pub(super) fn send<C, E>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, [u8], [u8]>,
    mut waiting: impl FnMut() -> Result<(), E>,
) -> Result<(), SendError<E>>
where
    C: ProducerContext<DeliveryOpaque = ()>,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((error, back)) if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                producer.poll(Duration::from_millis(10));
                waiting().map_err(SendError::GaveUp)?;
                record = back;
            }
            Err((error, _)) => return Err(SendError::Kafka(error)),
        }
    }
}
