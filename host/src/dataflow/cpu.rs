//! The processor time of task threads.
//!
//! A subtask's busy time (neither held back nor idle) is wall-clock time:
//! with more busy threads than cores, a "busy" task may be waiting for a
//! core. Processor time tells the two apart, and says what bounds a job:
//! on this project's two-core machines, a job at parallelism 1 already
//! keeps a source thread and an operator thread running, so parallelism 2
//! can only be faster by what the cores have left over.
//!
//! Linux keeps each thread's time on a processor, in nanoseconds, in
//! `/proc/<pid>/task/<tid>/schedstat` (its first field). A task's thread
//! notes its id when it starts ([`ThreadCpu::begin`]), so that anyone may
//! read its time while it runs, and its final time when it ends
//! ([`ThreadCpu::end`]), as the file goes with the thread. Nothing is read
//! on a task's per-record path. Elsewhere, and where `/proc` is not
//! mounted, the figures are absent.
//!
//! The machine's own time ([`machine_time`]) adds what no process sees: the
//! time a hypervisor took from a virtual machine's cores.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The processor time of the thread a task runs in.
#[derive(Debug, Default)]
pub struct ThreadCpu {
    /// The thread's schedstat file, once it has started.
    path: OnceLock<PathBuf>,
    /// Its time when it ended.
    ended: OnceLock<Duration>,
}

impl ThreadCpu {
    /// Notes the calling thread as the task's.
    pub fn begin(&self) {
        if let Some(path) = this_thread() {
            let _ = self.path.set(path);
        }
    }

    /// Notes the calling thread's processor time as the task's final one.
    pub fn end(&self) {
        if let Some(time) = self.path.get().and_then(|path| read_schedstat(path)) {
            let _ = self.ended.set(time);
        }
    }

    /// The thread's processor time so far (its final one once it ended);
    /// `None` if the task has no thread of its own (an operator chained
    /// into another task's) or the time cannot be read.
    pub fn time(&self) -> Option<Duration> {
        self.ended.get().copied().or_else(|| read_schedstat(self.path.get()?))
    }
}

/// The calling thread's schedstat file, by its process and thread ids
/// (`/proc/thread-self` names them).
fn this_thread() -> Option<PathBuf> {
    let ids = std::fs::read_link("/proc/thread-self").ok()?;
    Some(PathBuf::from("/proc").join(ids).join("schedstat"))
}

fn read_schedstat(path: &std::path::Path) -> Option<Duration> {
    parse_schedstat(&std::fs::read_to_string(path).ok()?)
}

/// The time on a processor from a schedstat line: "<ns on cpu> <ns
/// waiting> <timeslices>".
fn parse_schedstat(line: &str) -> Option<Duration> {
    line.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// The processor time of the whole process so far, all its threads (live
/// and ended) together: user and system time from `/proc/self/stat`, in
/// the kernel's clock ticks (USER_HZ, 100 a second on Linux).
pub fn process_time() -> Option<Duration> {
    parse_process_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// utime and stime (fields 14 and 15) of a stat line, whose second field,
/// the command name in parentheses, may itself hold spaces.
fn parse_process_stat(line: &str) -> Option<Duration> {
    let after_name = &line[line.rfind(')')? + 1..];
    // After the name: state (field 3), …, utime (14), stime (15).
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(clock_ticks(utime + stime))
}

/// `/proc`'s times are in the kernel's clock ticks: USER_HZ, 100 a second
/// on Linux.
fn clock_ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 10)
}

/// The whole machine's time, all cores together, since it booted: from the
/// first line of `/proc/stat` ("cpu  user nice system idle iowait irq
/// softirq steal …", in USER_HZ ticks).
///
/// `steal` is time a virtual machine's cores were ready to run but the
/// hypervisor ran something else. On a shared host it moves figures far
/// more than any change to the code: a benchmark compares runs only if
/// little was stolen from either (see `weir bench`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTime {
    /// Every core's time: busy, idle and stolen.
    pub total: Duration,
    pub steal: Duration,
}

impl MachineTime {
    /// The time that passed between `earlier` and this reading.
    pub fn since(self, earlier: MachineTime) -> MachineTime {
        MachineTime { total: self.total.saturating_sub(earlier.total), steal: self.steal.saturating_sub(earlier.steal) }
    }

    /// The share of the time that was stolen, 0–1 (0 with no time).
    pub fn steal_share(&self) -> f64 {
        if self.total.is_zero() { 0.0 } else { self.steal.as_secs_f64() / self.total.as_secs_f64() }
    }
}

/// The machine's time so far; `None` where `/proc/stat` cannot be read.
pub fn machine_time() -> Option<MachineTime> {
    parse_machine_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The first line's first eight fields: user, nice, system, idle,
/// iowait, irq, softirq, steal (guest time is inside user already).
fn parse_machine_stat(text: &str) -> Option<MachineTime> {
    let fields = text.lines().next()?.strip_prefix("cpu ")?.split_whitespace();
    let ticks: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if ticks.len() != 8 {
        return None;
    }
    Some(MachineTime { total: clock_ticks(ticks.iter().sum()), steal: clock_ticks(ticks[7]) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_stolen_time_is_read() {
        let stat = "cpu  1523945 0 89915 7220272 10104 0 4303 41388 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let read = parse_machine_stat(stat).unwrap();
        assert_eq!(read.steal, Duration::from_millis(413_880));
        assert_eq!(read.total, Duration::from_millis((1523945 + 89915 + 7220272 + 10104 + 4303 + 41388) * 10));
        let later = "cpu  1524392 0 89940 7220511 10105 0 4305 41753 0 0\n";
        let run = parse_machine_stat(later).unwrap().since(read);
        assert_eq!((run.total, run.steal), (Duration::from_millis(10_790), Duration::from_millis(3_650)));
        assert!((run.steal_share() - 0.3383).abs() < 1e-3, "{}", run.steal_share());
        assert_eq!(parse_machine_stat("cpu  1 2 3\n"), None, "too few fields");
        assert_eq!(parse_machine_stat("intr 5\n"), None);
    }

    #[test]
    fn schedstat_and_stat_lines_are_read() {
        assert_eq!(parse_schedstat("564247898 377933 87\n"), Some(Duration::from_nanos(564_247_898)));
        assert_eq!(parse_schedstat(""), None);
        let stat = "7225 (weir (x) y) R 1 7225 1 0 -1 4194304 95 0 0 0 54 7 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_process_stat(stat), Some(Duration::from_millis(610)));
    }

    /// A thread's time grows with the work it does, is kept when it ends,
    /// and stays absent for a task that never had a thread.
    #[test]
    fn a_task_threads_time_is_read_while_it_runs_and_kept_when_it_ends() {
        if this_thread().is_none() {
            return; // No /proc here: the figures are absent by design.
        }
        let cpu = std::sync::Arc::new(ThreadCpu::default());
        assert_eq!(cpu.time(), None, "no thread yet");
        let (started, stop) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let worker = {
            let cpu = cpu.clone();
            std::thread::spawn(move || {
                cpu.begin();
                let until = std::time::Instant::now() + Duration::from_millis(150);
                let mut x = 0u64;
                while std::time::Instant::now() < until {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                started.0.send(()).unwrap();
                stop.1.recv().unwrap();
                cpu.end();
            })
        };
        started.1.recv().unwrap();
        let running = cpu.time().expect("read while the thread runs");
        assert!(running >= Duration::from_millis(50), "150 ms of spinning counted {running:?}");
        stop.0.send(()).unwrap();
        worker.join().unwrap();
        let ended = cpu.time().expect("kept after the thread ended");
        assert!(ended >= running, "{ended:?} < {running:?}");
        // (Counted in clock ticks, so within one or two of them.)
        assert!(process_time().expect("the process's time") + Duration::from_millis(30) >= ended);
    }
}
