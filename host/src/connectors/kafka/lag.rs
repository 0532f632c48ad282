//! The end of a partition as a Kafka source's client last saw it, for the
//! source's backlog (consumer lag).
//!
//! librdkafka keeps each partition's high watermark from every fetch
//! response; reading it is a lookup in the client, where asking the
//! brokers (`fetch_watermarks`) would cost a request per partition on the
//! source's thread. rust-rdkafka does not wrap the lookup, so it is called
//! here directly.

use std::ffi::CString;

use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

/// The high watermark of `partition` of `topic` from the consumer's last
/// fetch response; `None` before the first (or for a partition the client
/// does not know).
pub(super) fn last_seen_end<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32) -> Option<i64> {
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1_i64, -1_i64);
    // SAFETY: the client handle lives as long as `consumer`; the call reads
    // the partition's cached offsets under its lock and writes only the
    // two integers it is given.
    let error = unsafe {
        rd_kafka_get_watermark_offsets(consumer.client().native_ptr(), topic.as_ptr(), partition, &mut low, &mut high)
    };
    // An offset not known yet is librdkafka's OFFSET_INVALID (-1001).
    (error == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

#[cfg(test)]
mod tests {
    use rdkafka::ClientConfig;

    use super::*;

    #[test]
    fn a_partition_not_fetched_from_has_no_end_yet() {
        // No broker: the client is created, never connected.
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9").set("group.id", "g").create().unwrap();
        assert_eq!(last_seen_end(&consumer, "orders", 0), None);
        assert_eq!(last_seen_end(&consumer, "nul\0in name", 0), None);
    }
}
