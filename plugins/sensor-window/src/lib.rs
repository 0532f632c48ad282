//! `sensor-window`: each sensor's readings summed over tumbling windows,
//! or over session windows with `gap_ms`.
//!
//! Input keyed by sensor (`key_by = true`), value a number. Emits, when a
//! window closes, `(sensor, {"start": ms, "end": ms, "value": sum})`. In
//! event time (the default) windows close when the watermark passes their
//! end, so the result does not depend on arrival order or replay speed
//! for events within the source's `out_of_orderness_ms`;
//! `time = "processing"` windows by the wall clock instead, for comparison.
//! Events too late for their window go to the side output `late`.
//!
//! Config: `time` (`event` | `processing`), `size_ms` (1000), `offset_ms` (0:
//! windows start `offset_ms` after multiples of `size_ms`, as Flink's window
//! offset), `lateness_ms` (0); or `gap_ms` instead of `size_ms` and
//! `offset_ms`: session windows, each a sensor's readings until it has
//! been quiet for `gap_ms`.

use weir_sdk::windows::{Sum, Windows};
use weir_sdk::{Batch, Config, Context, Error, Event, Operator, Timer, TimerBatch};

pub struct SensorWindow {
    windows: Windows<Sum>,
}

impl Operator for SensorWindow {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&["time", "size_ms", "offset_ms", "gap_ms", "lateness_ms"])?;
        let windows = shape(config)?.allowed_lateness(config.parse_or("lateness_ms", 0)?).late_output("late");
        let windows = match config.get("time").unwrap_or("event") {
            "event" => windows,
            "processing" => windows.processing_time(),
            other => return Err(Error::config(format!("`time` is `event` or `processing`, not {other:?}"))),
        };
        Ok(SensorWindow { windows })
    }

    fn prepare(&mut self, batch: &mut Batch<'_>) -> Result<(), Error> {
        // One host call for all the batch's windows, not one per event.
        self.windows.prefetch(batch)
    }

    fn prepare_timers(&mut self, timers: &mut TimerBatch<'_>) -> Result<(), Error> {
        // Likewise for windows evicted from the instance's memory.
        self.windows.prefetch_timers(timers)
    }

    // Called by the SDK for every event: inlined into its loop, the event
    // stays in registers instead of being built in memory for a call.
    #[inline]
    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        let reading: f64 = event.value_as()?;
        let updated = self.windows.add(ctx, event, reading)?;
        // Nearly always none (a window changes after it fired only for a
        // late event): checked first, the loop stays off the event's path.
        if !updated.is_empty() {
            for updated in updated {
                // Stamped as the window's firing is (its end - 1), as Flink
                // stamps a late firing, not with the late event's time.
                let timestamp = Some(updated.end - 1);
                ctx.emit_at(event.key(), updated, timestamp);
            }
        }
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
        for result in self.windows.on_timer(ctx, timer)? {
            ctx.emit(timer.key(), result);
        }
        Ok(())
    }
}

/// Tumbling windows, or session windows when the config has a `gap_ms`.
fn shape(config: &Config) -> Result<Windows<Sum>, Error> {
    let positive = |key: &str, default: i64| -> Result<i64, Error> {
        let value: i64 = config.parse_or(key, default)?;
        if value <= 0 {
            return Err(Error::config(format!("`{key}` must be positive")));
        }
        Ok(value)
    };
    if config.get("gap_ms").is_none() {
        return Ok(Windows::tumbling("sums", positive("size_ms", 1000)?, Sum).offset(config.parse_or("offset_ms", 0)?));
    }
    if config.get("size_ms").is_some() || config.get("offset_ms").is_some() {
        return Err(Error::config("`gap_ms` makes session windows, which start at their first reading: drop `size_ms` and `offset_ms`"));
    }
    Ok(Windows::session("sums", positive("gap_ms", 1)?, Sum))
}

weir_sdk::export_operator!(SensorWindow);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn sums_each_sensor_per_second() {
        let mut op = TestHarness::<SensorWindow>::new(&[]).unwrap();
        op.process([TestEvent::new("p", 0.5).at(1_000), TestEvent::new("p", -0.25).at(1_999), TestEvent::new("t", 20.0).at(1_500)])
            .unwrap();
        let out = op.advance_watermark(1_999).unwrap();
        let values: Vec<(String, String)> = out.iter().map(|e| (e.key_str(), e.value_str())).collect();
        assert_eq!(
            values,
            vec![
                ("p".to_owned(), r#"{"start":1000,"end":2000,"value":0.25}"#.to_owned()),
                ("t".to_owned(), r#"{"start":1000,"end":2000,"value":20.0}"#.to_owned()),
            ]
        );
    }

    /// A restored instance reads a batch's windows in one host call; one
    /// started on empty state knows there is nothing to read.
    #[test]
    fn a_batch_reads_its_windows_in_one_host_call() {
        let batch = || (0..100).map(|i| TestEvent::new(format!("s{}", i % 10), 1.0).at(i * 25));
        let mut fresh = TestHarness::<SensorWindow>::new(&[]).unwrap();
        fresh.process(batch()).unwrap();
        assert_eq!(fresh.map_fetches(), 0, "nothing to read on empty state");
        let mut op = fresh.restored(&[]).unwrap();
        op.process(batch().map(|e| e.at(5_000))).unwrap();
        assert_eq!(op.map_fetches(), 1, "10 sensors' windows, fetched together");
        let out = op.advance_watermark(10_000).unwrap();
        assert_eq!(out.len(), 40, "every window of every sensor fires once");
    }

    /// A window's result, on time or updated by a late event within the
    /// allowed lateness, carries the window's last moment (end - 1) as
    /// its timestamp, as in Flink: a later event-time stage sees it in its
    /// window, not at the late event's time (found by the event-time audit).
    #[test]
    fn results_are_stamped_with_their_windows_end() {
        let mut op = TestHarness::<SensorWindow>::new(&[("lateness_ms", "10000")]).unwrap();
        op.process([TestEvent::new("p", 1.0).at(500)]).unwrap();
        let fired = op.advance_watermark(5_000).unwrap();
        let late = op.process([TestEvent::new("p", 2.0).at(100)]).unwrap();
        let stamps: Vec<(String, Option<i64>)> = fired.iter().chain(&late).map(|e| (e.value_str(), e.timestamp)).collect();
        assert_eq!(
            stamps,
            [(r#"{"start":0,"end":1000,"value":1.0}"#.to_owned(), Some(999)), (r#"{"start":0,"end":1000,"value":3.0}"#.to_owned(), Some(999))]
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert!(TestHarness::<SensorWindow>::new(&[("time", "wall")]).is_err());
        assert!(TestHarness::<SensorWindow>::new(&[("size_ms", "0")]).is_err());
        assert!(TestHarness::<SensorWindow>::new(&[("gap_ms", "0")]).is_err());
        let error = TestHarness::<SensorWindow>::new(&[("gap_ms", "100"), ("offset_ms", "5")]).err().expect("refused");
        assert!(error.to_string().contains("drop `size_ms` and `offset_ms`"), "{error}");
    }

    /// With `gap_ms`, a sensor's readings less than the gap apart sum in
    /// one session, which closes `gap_ms` after its last reading.
    #[test]
    fn sums_each_sensor_per_session() {
        let mut op = TestHarness::<SensorWindow>::new(&[("gap_ms", "100")]).unwrap();
        let readings = [("p", 1.0, 0), ("p", 2.0, 99), ("p", 4.0, 300), ("t", 8.0, 50)];
        op.process(readings.map(|(sensor, value, at)| TestEvent::new(sensor, value).at(at))).unwrap();
        let out = op.advance_watermark(1_000).unwrap();
        let values: Vec<String> = out.iter().map(|e| format!("{} {}", e.key_str(), e.value_str())).collect();
        assert_eq!(
            values,
            [r#"t {"start":50,"end":150,"value":8.0}"#, r#"p {"start":0,"end":199,"value":3.0}"#, r#"p {"start":300,"end":400,"value":4.0}"#]
        );
    }
}
