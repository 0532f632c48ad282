//! `weir jobs`, `weir savepoint`, `weir cancel`, `weir upgrade` and
//! `weir fork`: requests to a running host's control API.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use weir::connectors::PartitionBacklog;
use weir::control::client::{ApiClient, ClientError};
use weir::control::registry;
use weir::control::{ApiToken, DEFAULT_API_ADDR, ForkRequest, JobInfo, NodeInfo, SavepointRequest, UpgradeRequest};

/// Where the host is.
#[derive(Debug, Clone, Args)]
pub struct ApiArg {
    /// The address of the running host's control API [default: $WEIR_API,
    /// else the host on this machine that runs the job named (127.0.0.1:7070
    /// first)].
    #[arg(long, value_name = "ADDR")]
    pub api: Option<String>,
}

impl ApiArg {
    /// `--api`, else `WEIR_API`, if either is given.
    fn given(&self) -> Option<String> {
        self.api.clone().or_else(|| std::env::var("WEIR_API").ok()).map(|a| a.trim().to_owned()).filter(|a| !a.is_empty())
    }

    /// The host at the address given, else the one on this machine that
    /// runs job `name` (saying so if it is not at the default address) —
    /// else the first that answers, or the default's, whose error then
    /// says that it has no such job, or cannot be reached.
    fn client_for(&self, name: &str) -> ApiClient {
        if let Some(addr) = self.given() {
            return client(&addr);
        }
        let hosts = discovered();
        match hosts.iter().find(|(_, jobs)| jobs.iter().any(|job| job.name == name)) {
            Some((host, _)) => {
                if host.addr() != DEFAULT_API_ADDR {
                    say!("weir: job `{name}` is on the host at {} (found without --api)", host.addr());
                }
                host.clone()
            }
            None => hosts.into_iter().next().map_or_else(|| client(DEFAULT_API_ADDR), |(host, _)| host),
        }
    }

    /// The host at the address given, else every host on this machine that
    /// answers (the default address's first), each with its jobs as it
    /// answered — else the default's error.
    fn hosts_with_jobs(&self) -> Result<Vec<(ApiClient, Vec<JobInfo>)>, ClientError> {
        let only = match self.given() {
            Some(addr) => client(&addr),
            None => {
                let hosts = discovered();
                if !hosts.is_empty() {
                    return Ok(hosts);
                }
                client(DEFAULT_API_ADDR)
            }
        };
        let jobs = only.jobs()?;
        Ok(vec![(only, jobs)])
    }
}

/// A client of the host at `addr`, presenting the token in
/// `WEIR_API_TOKEN` if it is set.
fn client(addr: &str) -> ApiClient {
    ApiClient::new(addr).with_token(ApiToken::from_env())
}

/// Every host on this machine that answers, with its jobs: the default
/// address's first, then those the hosts announced (see [`registry`]).
/// Asked once each, so that a host ending meanwhile is passed over, not
/// reported as failing.
fn discovered() -> Vec<(ApiClient, Vec<JobInfo>)> {
    let mut addrs = vec![DEFAULT_API_ADDR.to_owned()];
    addrs.extend(registry::announced().into_iter().filter(|addr| addr != DEFAULT_API_ADDR));
    let answering = addrs.iter().filter_map(|addr| {
        let host = client(addr);
        let jobs = host.jobs().ok()?;
        Some((host, jobs))
    });
    answering.collect()
}

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Show this job only, with a line for each of its sources, operators
    /// and sinks.
    pub job: Option<String>,
    #[command(flatten)]
    pub api: ApiArg,
}

/// `weir savepoint JOB ...` or `weir savepoint inspect DIR ...`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SavepointArgs {
    #[command(subcommand)]
    pub command: Option<SavepointCommand>,
    /// The running job to take a savepoint of.
    #[arg(required = true, value_name = "JOB")]
    pub job: Option<String>,
    /// Where to write it [default: CHECKPOINT_DIR/savepoints/savepoint-JOB-MILLIS,
    /// or savepoints/ in the host's working directory for a job without
    /// checkpoints].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Stop the job once the savepoint is written.
    #[arg(long)]
    pub stop: bool,
    #[command(flatten)]
    pub api: ApiArg,
}

#[derive(Debug, Subcommand)]
pub enum SavepointCommand {
    /// Show what a savepoint directory holds, verifying it.
    Inspect {
        /// The savepoint directory.
        dir: PathBuf,
        /// List its keyed entries too.
        #[arg(long)]
        entries: bool,
        /// List at most this many entries.
        #[arg(long, value_name = "N", requires = "entries")]
        limit: Option<usize>,
    },
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The job to cancel.
    pub job: String,
    #[command(flatten)]
    pub api: ApiArg,
}

#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The running job.
    pub job: String,
    /// The uid of the operator to swap the plugin of.
    #[arg(long, value_name = "UID")]
    pub operator: String,
    /// The new plugin file (.wasm).
    #[arg(long, value_name = "NEW.wasm")]
    pub plugin: PathBuf,
    /// Where to write the savepoint the upgrade goes through.
    #[arg(long, value_name = "DIR")]
    pub savepoint_dir: Option<PathBuf>,
    #[command(flatten)]
    pub api: ApiArg,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// A running job's name (a savepoint is taken first), or a savepoint directory.
    pub from: String,
    /// The new job's name.
    #[arg(long)]
    pub name: String,
    /// Run an operator with another plugin (repeatable).
    #[arg(long = "operator", value_name = "UID=PLUGIN", value_parser = assignment)]
    pub operators: Vec<(String, PathBuf)>,
    /// Write a sink to another path (repeatable).
    #[arg(long = "sink", value_name = "NAME=PATH", value_parser = assignment)]
    pub sinks: Vec<(String, PathBuf)>,
    /// Write a Kafka sink to another topic (repeatable).
    #[arg(long = "topic", value_name = "NAME=TOPIC", value_parser = topic_assignment)]
    pub topics: Vec<(String, String)>,
    /// The new job's checkpoint directory [default: beside the original's,
    /// named after the new job].
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    #[command(flatten)]
    pub api: ApiArg,
}

/// `UID=PLUGIN` or `NAME=PATH` (clap names which in its message).
fn assignment(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, path)) if !name.trim().is_empty() && !path.is_empty() => {
            Ok((name.trim().to_owned(), PathBuf::from(path)))
        }
        _ => Err(format!("expected a name, `=` and a path, got `{text}`")),
    }
}

/// `NAME=TOPIC`.
fn topic_assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, topic)) if !name.trim().is_empty() && !topic.trim().is_empty() => {
            Ok((name.trim().to_owned(), topic.trim().to_owned()))
        }
        _ => Err(format!("expected NAME=TOPIC, got `{text}`")),
    }
}

/// A path as the host must see it: its working directory may not be ours.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot make {} an absolute path", path.display()))
}

pub fn jobs(args: &JobsArgs) -> anyhow::Result<()> {
    if let Some(name) = &args.job {
        let job = args.api.client_for(name).job(name)?;
        // A cancelled job shows the figures it had last, over its last seconds.
        let live = matches!(job.status.as_str(), "running" | "upgrading" | "restarting" | "cancelled");
        let (table, nodes) = (jobs_table(std::slice::from_ref(&job)), nodes_table(&job.nodes, live));
        out_text!("{table}{nodes}{}{}", backlogs(&job.nodes), state_sizes(&job.nodes));
        return Ok(());
    }
    let hosts = args.api.hosts_with_jobs()?;
    for (i, (client, jobs)) in hosts.iter().enumerate() {
        if hosts.len() > 1 {
            out!("{}the Weir host at {}:", if i == 0 { "" } else { "\n" }, client.addr());
        }
        match jobs.is_empty() {
            true => out!("no jobs in the Weir host at {}", client.addr()),
            false => out_text!("{}", jobs_table(jobs)),
        }
    }
    Ok(())
}

/// The table of `weir jobs`, then why the failed jobs failed.
fn jobs_table(jobs: &[JobInfo]) -> String {
    let header = ["NAME", "STATUS", "UPTIME", "READ", "WRITTEN", "CHECKPOINT", "OPERATORS"];
    let right = [false, false, true, true, true, false, false];
    let rows = jobs.iter().map(|job| {
        let operators = job
            .operators
            .iter()
            .map(|op| {
                let file = op.plugin.file_name().map_or_else(|| op.plugin.display().to_string(), |f| {
                    f.to_string_lossy().into_owned()
                });
                format!("{}={file}", op.uid)
            })
            .collect::<Vec<_>>()
            .join(", ");
        [
            job.name.clone(),
            job.status.clone(),
            duration(job.uptime_s),
            job.read.to_string(),
            job.written.to_string(),
            checkpoint_cell(job),
            operators,
        ]
    });
    let mut out = table(header, right, rows);
    for job in jobs {
        if let Some(error) = &job.error {
            out += &format!("\njob `{}` {}: {error}\n", job.name, job.status);
        }
        if let Some(failure) = job.last_failure.as_ref().filter(|_| job.error.is_none()) {
            // While it waits, its count is of the restart to come.
            let restarts = match job.status.as_str() {
                "restarting" => format!("restarting (restart {})", job.restarts),
                status => format!("{status}, after {} restart(s)", job.restarts),
            };
            out += &format!("\njob `{}` {restarts}; the last failure: {failure}\n", job.name);
        }
    }
    out
}

/// A job's sources, operators and sinks: records in and out in all, then
/// over the last few seconds their rates, the shares of their subtasks'
/// time spent working and held back by full channels (the rest they were
/// idle), the share of a core their threads got (less than BUSY when
/// busy threads wait for a core; "-" for an operator chained into another
/// node's threads), and how far the busiest subtask is above the mean
/// (skewed keys), and where its event time stands (its slowest subtask's
/// watermark). The rates are over the last few seconds of a `live` job,
/// else over its run.
pub(super) fn nodes_table(nodes: &[NodeInfo], live: bool) -> String {
    let Some(first) = nodes.first() else { return String::new() };
    let header = ["NODE", "SUBTASKS", "IN", "OUT", "IN/S", "OUT/S", "BUSY", "HELD BACK", "CPU", "SKEW", "WATERMARK"];
    let rows = nodes.iter().map(|node| {
        let recent = &node.recent;
        [
            node.node.clone(),
            node.subtasks.to_string(),
            node.counters.records_in.to_string(),
            node.counters.records_out.to_string(),
            format!("{:.0}", recent.records_in_per_s),
            format!("{:.0}", recent.records_out_per_s),
            format!("{:.0} %", recent.busy_ms_per_s() / 10.0),
            format!("{:.0} %", recent.backpressured_ms_per_s / 10.0),
            recent.cpu_ms_per_s.map_or_else(|| "-".into(), |ms| format!("{:.0} %", ms / 10.0)),
            format!("{:.2}", node.recent_skew()),
            node_event_time(node),
        ]
    });
    let table = table(header, [false, true, true, true, true, true, true, true, true, true, false], rows);
    let span = duration(first.recent.seconds);
    let span = if live { format!("the last {span}") } else { format!("its run, {span}") };
    format!("\n{table}(IN/S, OUT/S, BUSY, HELD BACK, CPU and SKEW over {span})\n")
}

/// What each source has yet to read, where it can tell: its records in
/// all, then for a Kafka source each partition's offset, end and lag.
fn backlogs(nodes: &[NodeInfo]) -> String {
    let mut out = String::new();
    for node in nodes {
        let subtasks = node.by_subtask.iter().filter_map(|s| Some((s.subtask, s.backlog.as_ref()?)));
        let partitions: Vec<(u32, &PartitionBacklog)> = subtasks.flat_map(|(i, b)| b.partitions.iter().map(move |p| (i, p))).collect();
        let bytes: Option<u64> = node.by_subtask.iter().map(|s| s.backlog.as_ref()?.bytes).sum();
        let total = match (node.backlog_records, bytes) {
            (Some(records), _) => format!("{records} records yet to read"),
            (None, _) if !partitions.is_empty() => "records yet to read not known (a partition's end not seen yet)".to_owned(),
            (None, Some(bytes)) => format!("{} yet to read", self::bytes(bytes)),
            (None, None) => continue,
        };
        out += &format!("\n{}: {total}\n", node.node);
        if partitions.is_empty() {
            continue;
        }
        let header = ["SUBTASK", "TOPIC", "PARTITION", "OFFSET", "END", "LAG"];
        let known = |n: Option<i64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let rows = partitions.iter().map(|(subtask, p)| {
            let lag = known(p.lag.map(|lag| lag as i64));
            [subtask.to_string(), p.topic.clone(), p.partition.to_string(), p.offset.to_string(), known(p.end), lag]
        });
        out += &table(header, [true, false, true, true, true, true], rows);
    }
    out
}

/// Lines of cells in columns as wide as their widest, right-aligned where
/// `right` says; trailing spaces trimmed.
fn table<const N: usize>(header: [&str; N], right: [bool; N], rows: impl Iterator<Item = [String; N]>) -> String {
    let rows: Vec<[String; N]> = std::iter::once(header.map(str::to_owned)).chain(rows).collect();
    let mut widths = [0; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = (0..N)
            .map(|i| match right[i] {
                true => format!("{:>w$}", row[i], w = widths[i]),
                false => format!("{:<w$}", row[i], w = widths[i]),
            })
            .collect();
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    out
}

/// A job's newest checkpoint in a cell: number, size, how long it took;
/// how many of its run failed, if any did; and how many sink epochs of
/// older checkpoints wait to be committed, if any do.
fn checkpoint_cell(job: &JobInfo) -> String {
    let mut cell = match &job.checkpoint {
        Some(c) => format!("#{} {} {:.0} ms", c.id, bytes(c.stats.size_bytes), c.stats.duration_ms),
        None => "-".to_owned(),
    };
    if job.checkpoints_failed > 0 {
        cell += &format!(" ({} failed)", job.checkpoints_failed);
    }
    if job.epochs_behind > 0 {
        cell += &format!(" ({} sink epochs not committed: see the log)", job.epochs_behind);
    }
    cell
}

pub fn savepoint(args: &SavepointArgs) -> anyhow::Result<()> {
    if let Some(SavepointCommand::Inspect { dir, entries, limit }) = &args.command {
        return crate::cli::savepoint_inspect::inspect(dir, *entries, *limit);
    }
    let job = args.job.as_deref().context("name the job to take a savepoint of")?;
    let request = SavepointRequest { dir: args.dir.as_deref().map(absolute).transpose()?, stop: args.stop };
    let info = args.api.client_for(job).savepoint(job, &request)?;
    out!(
        "savepoint of job `{}` written to {}: checkpoint {}, {}, {} entries, in {:.1} ms",
        info.job,
        info.dir.display(),
        info.checkpoint,
        bytes(info.size_bytes),
        info.entries,
        info.duration_ms
    );
    if args.stop {
        out!("job `{}` stopped", info.job);
    }
    if info.uncommitted > 0 {
        say!(
            "weir: warning: {} sink epoch(s) before the savepoint are not committed yet (its Kafka brokers away?); \
             they are kept in the job's checkpoint directory and committed when the job resumes from its \
             checkpoints, or from this savepoint with that directory in place — do not move or delete it",
            info.uncommitted
        );
    }
    Ok(())
}

pub fn cancel(args: &CancelArgs) -> anyhow::Result<()> {
    let job = args.api.client_for(&args.job).cancel(&args.job)?;
    out!("job `{}` {}: read {}, written {}", job.name, job.status, job.read, job.written);
    Ok(())
}

pub fn upgrade(args: &UpgradeArgs) -> anyhow::Result<()> {
    let request = UpgradeRequest {
        operator: args.operator.clone(),
        plugin: absolute(&args.plugin)?,
        savepoint_dir: args.savepoint_dir.as_deref().map(absolute).transpose()?,
    };
    let info = args.api.client_for(&args.job).upgrade(&args.job, &request)?;
    out!(
        "upgraded operator `{}` of job `{}` to {}: downtime {:.1} ms (savepoint {}, {} entries checked)",
        info.operator,
        info.job,
        info.plugin.display(),
        info.downtime_ms,
        info.savepoint.dir.display(),
        info.checked_entries
    );
    Ok(())
}

pub fn fork(args: &ForkArgs) -> anyhow::Result<()> {
    let client = args.api.client_for(&args.from);
    // FROM is a job when the host has one of that name, else a directory.
    let from = if client.jobs()?.iter().any(|job| job.name == args.from) {
        args.from.clone()
    } else {
        let dir = Path::new(&args.from);
        if !dir.is_dir() {
            anyhow::bail!(
                "`{}` is neither a job of the Weir host at {} nor a savepoint directory",
                args.from,
                client.addr()
            );
        }
        absolute(dir)?.to_string_lossy().into_owned()
    };
    let request = ForkRequest {
        from,
        name: args.name.clone(),
        operators: args
            .operators
            .iter()
            .map(|(uid, plugin)| Ok((uid.clone(), absolute(plugin)?)))
            .collect::<anyhow::Result<_>>()?,
        sinks: args
            .sinks
            .iter()
            .map(|(name, path)| Ok((name.clone(), absolute(path)?)))
            .collect::<anyhow::Result<_>>()?,
        topics: args.topics.clone(),
        checkpoint_dir: args.checkpoint_dir.as_deref().map(absolute).transpose()?,
    };
    let info = client.fork(&request)?;
    out!(
        "started job `{}` from {} (savepoint {}): {}",
        info.job.name,
        args.from,
        info.savepoint.display(),
        info.job.status
    );
    out_text!("{}", jobs_table(std::slice::from_ref(&info.job)));
    match &info.job_file {
        Some(file) => out!("its job file, to resume it after this host has stopped: weir run {}", file.display()),
        None => out!(
            "it takes no checkpoints (the job it was forked from has no `checkpoint_dir`): it cannot be resumed \
             once this host stops"
        ),
    }
    Ok(())
}

/// `12.5 s`, `3m05s`, `2h07m`, `3d04h`.
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0);
    let whole = s as u64;
    match whole {
        0..60 => format!("{s:.1}s"),
        60..3600 => format!("{}m{:02}s", whole / 60, whole % 60),
        3600..86400 => format!("{}h{:02}m", whole / 3600, whole % 3600 / 60),
        _ => format!("{}d{:02}h", whole / 86400, whole % 86400 / 3600),
    }
}

/// A node's watermark in a cell; while only some of its subtasks have
/// none, which (the ones holding its event time back).
fn node_event_time(node: &NodeInfo) -> String {
    let without: Vec<String> = node.by_subtask.iter().filter(|s| s.watermark_ms.is_none()).map(|s| s.subtask.to_string()).collect();
    match without.len() {
        0 => event_time(node.watermark_ms),
        n if n == node.by_subtask.len() => "-".into(),
        1 => format!("- (none from subtask {})", without[0]),
        _ => format!("- (none from subtasks {})", without.join(", ")),
    }
}

/// A watermark in a cell: a date and time (UTC) where it looks like one —
/// the events carry the clock's milliseconds — else the milliseconds; "end"
/// once the input has ended, "-" before the first.
fn event_time(watermark_ms: Option<i64>) -> String {
    /// 2000-01-01 and 2100-01-01, in ms since 1970.
    const CLOCK_LIKE: std::ops::Range<i64> = 946_684_800_000..4_102_444_800_000;
    match watermark_ms {
        None => "-".into(),
        Some(i64::MAX) => "end".into(),
        Some(ms) if CLOCK_LIKE.contains(&ms) => utc(ms),
        Some(ms) => format!("{ms} ms"),
    }
}

/// `ms` since 1970 as `YYYY-MM-DD hh:mm:ss.mmm` (UTC), by the proleptic
/// Gregorian calendar (Howard Hinnant's `civil_from_days`).
fn utc(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}.{milli:03}")
}

/// Each operator's keyed state, as its subtasks last measured it: with
/// more than one subtask, each one's entries too (one far above the
/// others holds skewed keys). Operators holding none are left out.
pub(super) fn state_sizes(nodes: &[NodeInfo]) -> String {
    let mut out = String::new();
    for node in nodes {
        let Some(size) = node.state.filter(|size| size.entries > 0) else { continue };
        out += &format!("\n{}: keyed state of {} entries, {}", node.node, size.entries, bytes(size.bytes));
        if node.by_subtask.len() > 1 {
            let each = node.by_subtask.iter().map(|s| s.state.map_or_else(|| "-".to_owned(), |size| size.entries.to_string()));
            out += &format!(" (by subtask: {})", each.collect::<Vec<_>>().join(", "));
        }
        out.push('\n');
    }
    out
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / 1048576.0),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use weir::checkpoint::{CheckpointStats, LatestCheckpoint};
    use weir::control::{Counters, OperatorInfo, Recent, SubtaskInfo};

    use super::*;

    #[test]
    fn the_jobs_table() {
        let job = JobInfo {
            name: "words".into(),
            status: "failed".into(),
            uptime_s: 125.0,
            read: 1000,
            written: 7,
            operators: vec![OperatorInfo { uid: "count".into(), plugin: "/p/word_count.wasm".into(), parallelism: 2 }],
            checkpoint: None,
            nodes: Vec::new(),
            error: Some("boom".into()),
            restarts: 0,
            last_failure: None,
            checkpoints_failed: 0,
            epochs_behind: 0,
        };
        let stats = CheckpointStats { duration_ms: 41.6, size_bytes: 3 << 20, ..CheckpointStats::default() };
        let checkpointed = JobInfo {
            name: "sums".into(),
            status: "running".into(),
            error: None,
            checkpoint: Some(LatestCheckpoint { id: 12, completed: 9, stats }),
            checkpoints_failed: 3,
            restarts: 2,
            last_failure: Some("operator `count` (subtask 1 of 2) failed: trap".into()),
            ..job.clone()
        };
        let table = jobs_table(&[job, checkpointed]);
        assert_eq!(
            table,
            "NAME   STATUS   UPTIME  READ  WRITTEN  CHECKPOINT                    OPERATORS\n\
             words  failed    2m05s  1000        7  -                             count=word_count.wasm\n\
             sums   running   2m05s  1000        7  #12 3.0 MiB 42 ms (3 failed)  count=word_count.wasm\n\
             \njob `words` failed: boom\n\
             \njob `sums` running, after 2 restart(s); the last failure: operator `count` (subtask 1 of 2) failed: trap\n"
        );
    }

    #[test]
    fn the_nodes_table_of_one_job() {
        let node = |node: &str, subtasks, records_in, records_out, per_s: [f64; 3]| {
            let watermark_ms = match subtasks {
                2 if records_in == 0 => Some(1_764_870_000_250),
                2 => Some(4_000),
                _ => Some(i64::MAX),
            };
            NodeInfo {
                node: node.into(),
                subtasks,
                counters: Counters {
                    records_in,
                    records_out,
                    backpressured_ms: 1_000.0,
                    idle_ms: 0.0,
                    cpu_ms: (subtasks == 2).then_some(1_000.0),
                },
                recent: Recent {
                    seconds: 5.0,
                    records_in_per_s: per_s[0],
                    records_out_per_s: per_s[1],
                    backpressured_ms_per_s: per_s[2],
                    idle_ms_per_s: 100.0,
                    cpu_ms_per_s: (subtasks == 2).then_some(per_s[2] / 2.0),
                },
                by_subtask: (0..subtasks)
                    .map(|subtask| SubtaskInfo {
                        subtask,
                        counters: Counters { records_in: records_in * u64::from(subtask + 1), ..Counters::default() },
                        // Skewed now as well: SKEW is over the last interval.
                        recent: Recent { records_in_per_s: f64::from(subtask + 1), ..Recent::default() },
                        watermark_ms,
                        ..SubtaskInfo::default()
                    })
                    .collect(),
                watermark_ms,
                backlog_records: None,
                state: None,
            }
        };
        let job = JobInfo {
            name: "counts".into(),
            status: "running".into(),
            uptime_s: 10.0,
            read: 500,
            written: 400,
            operators: Vec::new(),
            checkpoint: None,
            nodes: vec![
                node("source `gen`", 2, 0, 500, [0.0, 100.0, 750.0]),
                node("operator `count`", 2, 450, 420, [90.4, 84.0, 100.0]),
                node("sink `out`", 1, 400, 0, [80.0, 0.0, 0.0]),
            ],
            error: None,
            restarts: 0,
            last_failure: None,
            checkpoints_failed: 0,
            epochs_behind: 0,
        };
        assert_eq!(
            nodes_table(&job.nodes, true),
            "\n\
             NODE              SUBTASKS   IN  OUT  IN/S  OUT/S  BUSY  HELD BACK   CPU  SKEW  WATERMARK\n\
             source `gen`             2    0  500     0    100  15 %       75 %  38 %  1.00  2025-12-04 17:40:00.250\n\
             operator `count`         2  450  420    90     84  80 %       10 %   5 %  1.33  4000 ms\n\
             sink `out`               1  400    0    80      0  90 %        0 %     -  1.00  end\n\
             (IN/S, OUT/S, BUSY, HELD BACK, CPU and SKEW over the last 5.0s)\n"
        );
        let finished = nodes_table(&job.nodes, false);
        assert!(finished.ends_with("(IN/S, OUT/S, BUSY, HELD BACK, CPU and SKEW over its run, 5.0s)\n"), "{finished}");
        assert_eq!(nodes_table(&[], true), "", "a job that has not started has none");
        let mut waiting = job.nodes[0].clone();
        (waiting.by_subtask[1].watermark_ms, waiting.watermark_ms) = (None, None);
        assert!(nodes_table(&[waiting], true).contains("  - (none from subtask 1)\n"), "which subtask holds event time back");
    }

    #[test]
    fn what_sources_have_yet_to_read() {
        use weir::connectors::Backlog;
        let subtask = |subtask, backlog| SubtaskInfo { subtask, backlog: Some(backlog), ..SubtaskInfo::default() };
        let partition = |partition, offset, end| PartitionBacklog::new("orders".into(), partition, offset, end);
        let kafka = NodeInfo {
            node: "source `in`".into(),
            backlog_records: Some(560),
            by_subtask: vec![
                subtask(0, Backlog::of_partitions(vec![partition(0, 1200, Some(1700)), partition(2, 90, Some(90))])),
                subtask(1, Backlog::of_partitions(vec![partition(1, 940, Some(1000))])),
            ],
            ..NodeInfo::default()
        };
        let generator = NodeInfo {
            node: "source `gen`".into(),
            backlog_records: Some(7),
            by_subtask: vec![subtask(0, Backlog::records(7))],
            ..NodeInfo::default()
        };
        let file = NodeInfo { node: "source `lines`".into(), by_subtask: vec![subtask(0, Backlog::bytes(3 << 20))], ..NodeInfo::default() };
        let operator = NodeInfo { node: "operator `count`".into(), by_subtask: vec![SubtaskInfo::default()], ..NodeInfo::default() };
        assert_eq!(
            backlogs(&[kafka.clone(), generator, file, operator.clone()]),
            "\n\
             source `in`: 560 records yet to read\n\
             SUBTASK  TOPIC   PARTITION  OFFSET   END  LAG\n      \
                   0  orders          0    1200  1700  500\n      \
                   0  orders          2      90    90    0\n      \
                   1  orders          1     940  1000   60\n\
             \n\
             source `gen`: 7 records yet to read\n\
             \n\
             source `lines`: 3.0 MiB yet to read\n"
        );
        let mut starting = kafka;
        starting.backlog_records = None;
        starting.by_subtask[1] = subtask(1, Backlog::of_partitions(vec![partition(1, 0, None)]));
        let shown = backlogs(&[starting]);
        assert!(shown.starts_with("\nsource `in`: records yet to read not known (a partition's end not seen yet)\n"), "{shown}");
        assert!(shown.ends_with("      1  orders          1       0     -    -\n"), "{shown}");
        assert_eq!(backlogs(&[operator]), "", "only sources have input to read");
    }

    #[test]
    fn what_operators_hold_in_keyed_state() {
        use weir::state::StateSize;
        let subtask = |subtask, entries| SubtaskInfo { subtask, state: Some(StateSize { entries, bytes: entries * 40 }), ..SubtaskInfo::default() };
        let count = NodeInfo {
            node: "operator `count`".into(),
            state: Some(StateSize { entries: 3_000, bytes: 120_000 }),
            by_subtask: vec![subtask(0, 1_000), subtask(1, 2_000)],
            ..NodeInfo::default()
        };
        let one = NodeInfo { node: "operator `dedup`".into(), state: Some(StateSize { entries: 2, bytes: 80 }), by_subtask: vec![subtask(0, 2)], ..NodeInfo::default() };
        let source = NodeInfo { node: "source `in`".into(), by_subtask: vec![SubtaskInfo::default()], ..NodeInfo::default() };
        let stateless = NodeInfo { node: "operator `tokenize`".into(), state: Some(StateSize::default()), ..NodeInfo::default() };
        assert_eq!(
            state_sizes(&[source, stateless, count, one]),
            "\noperator `count`: keyed state of 3000 entries, 117.2 KiB (by subtask: 1000, 2000)\n\
             \noperator `dedup`: keyed state of 2 entries, 80 B\n"
        );
    }

    #[test]
    fn watermarks_read_as_times() {
        assert_eq!(event_time(None), "-");
        assert_eq!(event_time(Some(i64::MAX)), "end");
        assert_eq!(event_time(Some(1_500)), "1500 ms", "not the clock's time: shown as it is");
        assert_eq!(event_time(Some(951_782_400_000)), "2000-02-29 00:00:00.000");
        assert_eq!(event_time(Some(1_798_761_599_999)), "2026-12-31 23:59:59.999");
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(utc(-1), "1969-12-31 23:59:59.999");
    }

    #[test]
    fn figures() {
        assert_eq!(duration(12.34), "12.3s");
        assert_eq!(duration(3725.0), "1h02m");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(assignment("count=new.wasm").unwrap(), ("count".into(), PathBuf::from("new.wasm")));
        assert!(assignment("count").is_err());
    }
}
