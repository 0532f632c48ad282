//! The trait a plugin implements, and its configuration.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::state::{HostStart, RESIDENT_BYTES, resident_bytes_of};
use crate::{Batch, Context, Error, Event, Timer, TimerBatch};

/// A stream operator. One value is created per parallel instance by
/// [`Operator::init`]; the host then feeds it events.
///
/// Whatever the operator keeps in its own fields is lost on failure,
/// upgrade or rescale; results must depend only on events and keyed state
/// (see [`crate::ValueState`]).
pub trait Operator: Sized + 'static {
    /// Creates the operator from the `config` table of the job file.
    fn init(config: &Config) -> Result<Self, Error>;

    /// Called with each keyed batch before its events are processed, to
    /// fetch the state they will need in one host call rather than one per
    /// event ([`crate::MapState::prefetch`], [`crate::windows::Windows::prefetch`]).
    /// Optional: without it, state is fetched on first use.
    fn prepare(&mut self, batch: &mut Batch<'_>) -> Result<(), Error> {
        let _ = batch;
        Ok(())
    }

    /// Processes one event. State accessed through `ctx` belongs to the
    /// event's key.
    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error>;

    /// Called with the timers of a call before they fire, to fetch the
    /// state their `on_timer` will need in one host call
    /// ([`crate::windows::Windows::prefetch_timers`]). Optional: without it,
    /// state is fetched on first use.
    fn prepare_timers(&mut self, timers: &mut TimerBatch<'_>) -> Result<(), Error> {
        let _ = timers;
        Ok(())
    }

    /// Called when a timer the operator registered fires. State accessed
    /// through `ctx` belongs to the timer's key; output emitted without an
    /// explicit timestamp gets the timer's.
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
        let _ = (ctx, timer);
        Ok(())
    }
}

/// The prefix of the configuration keys the host sets itself.
const HOST_PREFIX: &str = "weir.";

/// Which instance of the operator this is, as the host tells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskInfo {
    /// This instance's subtask index, from 0.
    pub subtask: u32,
    /// How many subtasks the operator has.
    pub parallelism: u32,
    /// How many times the job has been restarted after a failure in this
    /// process (0 for the first run). Results must not depend on it; it is
    /// there for logging and for testing recovery.
    pub attempt: u32,
}

/// The operator's `config` table from the job file: string keys and values.
/// Keys starting with `weir.` are the host's ([`Config::task`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: BTreeMap<String, String>,
    task: TaskInfo,
    /// What the host's keyed state held when the instance started
    /// (`weir.state`).
    pub(crate) start: HostStart,
    /// The instance's memory limit in MiB (`weir.memory-limit-mb`), if the
    /// host says.
    memory_limit_mb: Option<u64>,
}

impl Config {
    /// A configuration from (key, value) pairs.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let (host, entries): (BTreeMap<String, String>, _) =
            pairs.into_iter().map(|(k, v)| (k.into(), v.into())).partition(|(key, _)| key.starts_with(HOST_PREFIX));
        let host = |name: &str| host.get(&format!("{HOST_PREFIX}{name}"));
        let number = |name: &str| host(name).and_then(|v| v.parse().ok()).unwrap_or_default();
        let task = TaskInfo { subtask: number("subtask"), parallelism: number("parallelism"), attempt: number("attempt") };
        // Without the key (an older host), nothing is known: ask the host.
        let start = if host("state").is_some_and(|v| v == "empty") { HostStart::Empty } else { HostStart::Restored };
        let memory_limit_mb = host("memory-limit-mb").and_then(|v| v.parse().ok());
        Config { entries, task, start, memory_limit_mb }
    }

    /// Bytes the instance's resident state may hold: [`resident_bytes_of`]
    /// its memory limit, or [`RESIDENT_BYTES`] when the host does not say.
    pub(crate) fn resident_bytes(&self) -> usize {
        self.memory_limit_mb.map_or(RESIDENT_BYTES, |mb| resident_bytes_of(usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)))
    }

    /// Which instance this is (subtask, parallelism, restart attempt).
    pub fn task(&self) -> TaskInfo {
        self.task
    }

    /// Whether this instance's keyed state was restored (from a checkpoint
    /// or savepoint, or handed over by a rescale) rather than empty, like
    /// Flink's `isRestored()`. An older host that does not say counts as
    /// restored.
    pub fn is_restored(&self) -> bool {
        self.start == HostStart::Restored
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// The value of `key` parsed as `T`, or `default` when it is not set.
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, Error> {
        match self.get(key) {
            None => Ok(default),
            Some(text) => text.parse().map_err(|_| {
                Error::config(format!("`{key}` = {text:?} is not a valid {}", std::any::type_name::<T>()))
            }),
        }
    }

    /// Fails with a clear message if the table has a key not in `known`.
    pub fn allow_only(&self, known: &[&str]) -> Result<(), Error> {
        match self.entries.keys().find(|key| !known.contains(&key.as_str())) {
            None => Ok(()),
            Some(key) => Err(Error::config(format!(
                "unknown key `{key}`; this operator understands: {}",
                if known.is_empty() { "no keys".to_string() } else { known.join(", ") }
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_or_defaults_and_reports_bad_values() {
        let config = Config::from_pairs([("n", "3"), ("bad", "x")]);
        assert_eq!(config.parse_or("n", 1u32), Ok(3));
        assert_eq!(config.parse_or("missing", 1u32), Ok(1));
        assert_eq!(
            config.parse_or("bad", true),
            Err(Error::config("`bad` = \"x\" is not a valid bool"))
        );
    }

    /// Every `weir.` key is the host's — also ones a later host adds — and
    /// none is the operator's config to refuse.
    #[test]
    fn host_keys_are_task_info_not_config() {
        let pairs = [("weir.attempt", "2"), ("weir.subtask", "1"), ("weir.state", "empty"), ("weir.later", "x"), ("n", "3")];
        let config = Config::from_pairs(pairs);
        assert_eq!(config.task().attempt, 2);
        assert_eq!(config.task().subtask, 1);
        assert_eq!(config.start, HostStart::Empty);
        assert!(!config.is_restored());
        assert_eq!(config.get("weir.attempt"), None);
        assert!(config.allow_only(&["n"]).is_ok());
        for pairs in [&[("weir.state", "restored")][..], &[]] {
            assert!(Config::from_pairs(pairs.iter().copied()).is_restored(), "{pairs:?}");
        }
    }

    /// Resident state may take half of what the instance's memory limit
    /// leaves past 32 MiB, an eighth of a smaller limit, or the default
    /// bound from a host that does not say it.
    #[test]
    fn resident_state_is_bounded_by_the_memory_limit() {
        let limited = |mb: &str| Config::from_pairs([("weir.memory-limit-mb", mb)]).resident_bytes();
        assert_eq!(limited("24"), 3 << 20);
        assert_eq!(limited("64"), 16 << 20);
        assert_eq!(limited("512"), 240 << 20);
        assert_eq!(limited("4096"), 2032 << 20);
        assert_eq!(limited("lots"), RESIDENT_BYTES, "unreadable: the default");
        assert_eq!(Config::default().resident_bytes(), RESIDENT_BYTES);
    }

    #[test]
    fn allow_only_names_the_unknown_key() {
        let config = Config::from_pairs([("lowercase", "true"), ("colour", "red")]);
        let err = config.allow_only(&["lowercase"]).unwrap_err();
        assert_eq!(err, Error::config("unknown key `colour`; this operator understands: lowercase"));
    }
}
