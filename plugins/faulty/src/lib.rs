//! `faulty`: an operator that misbehaves on purpose, to test the sandbox.
//!
//! `mode` (config) chooses how, on the first event it sees:
//! - `panic`: panics (a trap), with the message "faulty operator panicked on purpose";
//! - `exit`: calls `std::process::exit(3)`;
//! - `alloc`: allocates memory without bound, until the memory cap stops it;
//! - `loop`: loops forever, until the call deadline interrupts it;
//! - `sleep`: sleeps for an hour (blocked in the host's
//!   `wasi:clocks`/`wasi:io/poll`, where no epoch check runs), until the
//!   call deadline ends the sleep and interrupts it;
//! - `error`: returns an error;
//! - `probe`: tries to escape the sandbox (read a file, list the
//!   environment, open a connection) and emits what happened, keyed
//!   `fs`, `env` and `net`;
//! - `none`: forwards events unchanged.
//! - `huge`: emits, for each event, a value of `after` bytes;
//! - `chatty`: forwards events unchanged, writing a line of 1 KiB to
//!   stderr for each, and panics at event `after` (config, default 1000),
//!   its last line before the panic saying so.
//! - `trap-once`: counts keyed events like `word-count` (emits `(key, n)`),
//!   but on the first run of the job (restart attempt 0) panics after
//!   `after` events (config, default 1000) — to test recovery.
//! - `always-trap`: like `trap-once`, on every attempt.
//! - `pre-weir-state`: forwards events like `none`, but refuses to start
//!   with the host keys added since the first Rust SDK (`weir.state`,
//!   `weir.memory-limit-mb`), as plugins built with that SDK do (their
//!   config check calls the first of them unknown) — to test that the host
//!   starts such plugins without those keys.
//! - `rearm`: sets an event-time timer at time 0 for each key (a keyed
//!   input), and in `on_timer` sets it again for the time firing, so that
//!   it fires again at once, forever.
//! - `chain`: not a fault — a periodic timer catching up: sets an
//!   event-time timer at each keyed event's time, and in `on_timer` the
//!   next millisecond's, up to the latest time its key has seen; emits the
//!   key and that time when the chain reaches it. A watermark that jumps
//!   fires every millisecond between, one after the other, in one advance.
//! - `slow-flush`: keeps, for the first 10 events' keys, a value that
//!   takes for ever to write: the SDK writes state back in `flush` (at a checkpoint), where
//!   the call deadline interrupts it.
//! - `big-state`: not a fault — keeps each key's latest value as its state
//!   (values as large as the events'), and emits the key with the value's
//!   length.
//! - `try-alloc`: not a fault — for each event, asks for `after` MiB with
//!   `try_reserve` and emits whether it was `granted` or `refused`: a
//!   plugin may handle reaching its memory cap.
//! - `state-names`: names a new value state for each event (its number,
//!   zero-padded to `after` digits) and sets it — state named by data,
//!   which the host bounds in number and length.
//! - `timers`: sets `after` event-time timers for each event, at distinct
//!   times far in the future — timers set by event rather than by key and
//!   window, which the host bounds per subtask (`timer_limit`).

use weir_sdk::{Config, Context, Error, Event, Operator, TimeDomain, Timer, ValueState};

pub struct Faulty {
    mode: Mode,
    /// Events this instance has processed.
    seen: u64,
    /// `trap-once` / `always-trap`: panic after this many events.
    after: u64,
    attempt: u32,
    count: ValueState<u64>,
    /// `chain`: the latest event time of the key.
    until: ValueState<i64>,
    /// `big-state`: the key's latest value.
    latest: ValueState<String>,
    /// `slow-flush`: a value that takes for ever to write.
    slow: ValueState<SlowToWrite>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Panic,
    Exit,
    Alloc,
    Loop,
    Sleep,
    Error,
    Probe,
    None,
    Huge,
    Chatty,
    TrapOnce,
    AlwaysTrap,
    PreWeirState,
    Rearm,
    Chain,
    StateNames,
    SlowFlush,
    BigState,
    TryAlloc,
    Timers,
}

impl Operator for Faulty {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&["mode", "after"])?;
        let mode = match config.get("mode").unwrap_or("none") {
            "panic" => Mode::Panic,
            "exit" => Mode::Exit,
            "alloc" => Mode::Alloc,
            "loop" => Mode::Loop,
            "sleep" => Mode::Sleep,
            "error" => Mode::Error,
            "probe" => Mode::Probe,
            "none" => Mode::None,
            "chatty" => Mode::Chatty,
            "huge" => Mode::Huge,
            "trap-once" => Mode::TrapOnce,
            "always-trap" => Mode::AlwaysTrap,
            "pre-weir-state" => Mode::PreWeirState,
            "rearm" => Mode::Rearm,
            "chain" => Mode::Chain,
            "state-names" => Mode::StateNames,
            "slow-flush" => Mode::SlowFlush,
            "big-state" => Mode::BigState,
            "try-alloc" => Mode::TryAlloc,
            "timers" => Mode::Timers,
            other => {
                return Err(Error::config(format!(
                    "unknown mode {other:?}; use panic, exit, alloc, loop, sleep, error, probe, none, huge, chatty, \
                     trap-once, always-trap, pre-weir-state, rearm, chain, slow-flush, big-state, try-alloc, \
                     state-names or timers"
                )));
            }
        };
        if mode == Mode::PreWeirState && !config.is_restored() {
            // The words of the older SDK's `allow_only`, which the host
            // knows, about the first of the newer keys (they are sorted).
            // Without them, the SDK counts as restored.
            return Err(Error::config("unknown key `weir.memory-limit-mb`; this operator understands: mode, after"));
        }
        let after = config.parse_or("after", 1000)?;
        let attempt = config.task().attempt;
        Ok(Faulty {
            mode,
            seen: 0,
            after,
            attempt,
            count: ValueState::new("count"),
            until: ValueState::new("until"),
            latest: ValueState::new("latest"),
            slow: ValueState::new("slow"),
        })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        match self.mode {
            Mode::TrapOnce | Mode::AlwaysTrap => {
                self.seen += 1;
                let trap = self.mode == Mode::AlwaysTrap || self.attempt == 0;
                if trap && self.seen > self.after {
                    panic!("faulty operator trapped on purpose after {} events (attempt {})", self.after, self.attempt);
                }
                let n = self.count.get(ctx)?.unwrap_or(0) + 1;
                self.count.set(ctx, &n)?;
                ctx.emit(event.key(), n);
                return Ok(());
            }
            Mode::Panic => panic!("faulty operator panicked on purpose"),
            Mode::Exit => std::process::exit(3),
            Mode::Alloc => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            Mode::Loop => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Mode::Sleep => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Ok(())
            }
            Mode::Error => {
                eprintln!("faulty: giving up on this batch");
                Err(Error::other("faulty operator failed on purpose"))
            }
            Mode::Probe => {
                let fs = match std::fs::read("/etc/hostname") {
                    Ok(bytes) => format!("read {} bytes", bytes.len()),
                    Err(e) => format!("denied: {e}"),
                };
                let env = format!("{} variables", std::env::vars().count());
                let net = match std::net::TcpStream::connect("127.0.0.1:9") {
                    Ok(_) => "connected".to_string(),
                    Err(e) => format!("denied: {e}"),
                };
                for (key, value) in [("fs", fs), ("env", env), ("net", net)] {
                    ctx.emit(key, value);
                }
                Ok(())
            }
            Mode::Huge => {
                ctx.emit(event.key(), "x".repeat(self.after as usize));
                Ok(())
            }
            Mode::Chatty => {
                self.seen += 1;
                if self.seen == self.after {
                    eprintln!("event {} of a chatty operator: stopping here", self.seen);
                    panic!("faulty operator panicked after {} lines of log", self.seen - 1);
                }
                eprintln!("event {} of a chatty operator: {}", self.seen, "x".repeat(1000));
                ctx.emit(event.key(), event.value());
                Ok(())
            }
            Mode::None | Mode::PreWeirState => {
                ctx.emit(event.key(), event.value());
                Ok(())
            }
            Mode::Rearm => ctx.register_timer(TimeDomain::EventTime, 0),
            Mode::SlowFlush => {
                // A few keys only: the SDK measures what it holds (by
                // writing values out) from 64 on, which would loop here.
                self.seen += 1;
                if self.seen <= 10 { self.slow.set(ctx, &SlowToWrite) } else { Ok(()) }
            }
            Mode::TryAlloc => {
                let mut buffer: Vec<u8> = Vec::new();
                let granted = buffer.try_reserve_exact((self.after as usize) << 20).is_ok();
                ctx.emit(event.key(), if granted { "granted" } else { "refused" });
                Ok(())
            }
            Mode::BigState => {
                let value = String::from_utf8_lossy(event.value()).into_owned();
                ctx.emit(event.key(), value.len() as u64);
                self.latest.set(ctx, &value)
            }
            Mode::StateNames => {
                self.seen += 1;
                let name = format!("{:0width$}", self.seen, width = self.after as usize);
                ValueState::<u64>::new(&name).set(ctx, &self.seen)
            }
            Mode::Timers => {
                self.seen += 1;
                let first = i64::MAX / 2 + (self.seen * self.after) as i64;
                (first..first + self.after as i64).try_for_each(|time| ctx.register_timer(TimeDomain::EventTime, time))
            }
            Mode::Chain => {
                let time = event.timestamp().ok_or_else(|| Error::input("`chain` needs events with timestamps"))?;
                if self.until.get(ctx)?.is_none_or(|until| until < time) {
                    self.until.set(ctx, &time)?;
                }
                ctx.register_timer(TimeDomain::EventTime, time)
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
        match self.mode {
            Mode::Rearm => ctx.register_timer(TimeDomain::EventTime, timer.timestamp()),
            Mode::Chain => {
                let until = self.until.get(ctx)?.unwrap_or(i64::MIN);
                if timer.timestamp() < until {
                    ctx.register_timer(TimeDomain::EventTime, timer.timestamp() + 1)
                } else {
                    ctx.emit(timer.key(), timer.timestamp());
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }
}

/// A value whose serialisation never ends (`slow-flush`).
#[derive(Clone, serde::Deserialize)]
struct SlowToWrite;

impl serde::Serialize for SlowToWrite {
    fn serialize<S: serde::Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

weir_sdk::export_operator!(Faulty);
