//! `weir run`: a host running one job (and whatever forks join it), with
//! its control API on localhost.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use clap::Args;
use weir::control::{ApiToken, DEFAULT_API_ADDR};
use weir::control::registry::Announcement;
use weir::control::server::ApiServer;
use weir::dataflow::{JobSummary, WrittenBy};
use weir::host::{JobManager, JobStatus};
use weir::job::{self, JobGraph, NodeKind, Overrides};
use weir::checkpoint::{CheckpointStorage, SavepointStart};
use weir::savepoint::{MANIFEST_FILE, Savepoint};
use weir::PluginEngine;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file.
    job: PathBuf,
    /// Default parallelism of the job's sources and operators (overrides
    /// the job file's top-level `parallelism`; a node that sets its own
    /// keeps it, as with Flink's `-p`).
    #[arg(long, short = 'p', value_parser = clap::value_parser!(u32).range(1..))]
    parallelism: Option<u32>,
    /// Start from this savepoint (state is matched to operators by uid;
    /// key groups are spread over the parallelism the job has now), or
    /// from this retained checkpoint (`CHECKPOINT_DIR/chk-N`: written as a
    /// savepoint first, into the job's checkpoint directory's savepoints/).
    #[arg(long, value_name = "DIR")]
    from_savepoint: Option<PathBuf>,
    /// Restore even though the savepoint (or the checkpoint the job
    /// resumes from) has state for operators or sources the job no longer
    /// has (that state is dropped).
    #[arg(long)]
    allow_non_restored_state: bool,
    /// Where to serve the control API [default: $WEIR_API, else
    /// 127.0.0.1:7070, or any free port if that one is taken].
    #[arg(long, value_name = "ADDR")]
    api: Option<String>,
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let mut graph = job::load(&args.job, Overrides { parallelism: args.parallelism })?;
    if let Some(p) = args.parallelism {
        say_if_unused(&graph, p);
    }
    let engine = PluginEngine::new()?;
    let manager = JobManager::new(engine.clone());
    let savepoint = match &args.from_savepoint {
        Some(dir) => Some(open_savepoint(dir, &graph, &engine, &manager, args.allow_non_restored_state)?),
        // Resuming, the job keeps the plugins it was upgraded to; from the
        // savepoint its last run began from, if that run took no checkpoint.
        None => {
            weir::dataflow::carry_upgrades(&mut graph);
            weir::dataflow::savepoint_to_restore(&graph)?
        }
    };
    // The address the other commands use too, so that they find this host.
    let api = match (&args.api, std::env::var("WEIR_API")) {
        (Some(addr), _) => Some((addr.clone(), "--api")),
        // Set but empty is unset, as for the other commands.
        (None, Ok(addr)) if !addr.is_empty() => Some((addr, "$WEIR_API")),
        (None, _) => None,
    };
    let server = serve(api.as_ref().map(|(addr, from)| (addr.as_str(), *from)), &manager)?;
    let stopped_by = shut_down_on_signals(&manager)?;
    // A savepoint written of a retained checkpoint for this run, which a
    // refused run leaves unused.
    let written_for_run = savepoint.as_ref().map(|s| s.dir.clone()).filter(|_| args.from_savepoint.as_deref().is_some_and(is_retained_checkpoint));
    if let Err(refused) = manager.submit(graph.clone(), savepoint, args.allow_non_restored_state) {
        // (Unless the run recorded that it began from it before it failed:
        // the next `weir run` restores it again.)
        let recorded = |dir: &Path| {
            let start = graph.checkpoints.as_ref().and_then(|c| SavepointStart::read(&c.dir).ok().flatten());
            start.is_some_and(|start| start.savepoint == dir)
        };
        if let Some(unused) = written_for_run.filter(|dir| !recorded(dir)) {
            let _ = std::fs::remove_dir_all(unused);
        }
        exit_if_signalled(&stopped_by);
        return Err(anyhow::anyhow!("job `{}` did not start: {refused}", graph.name));
    }
    // Announced once the job is accepted (a refused one has no API to
    // offer) — to the other commands before it is said, so that a command
    // run as soon as the line shows finds the host.
    let _announced = Announcement::publish(server.addr());
    say!("weir: control API on http://{0} (the weir commands find it; or pass --api {0})", server.addr());
    let ended = manager.wait_all();
    drop(server);
    // A signal that came as the jobs finished cancelled none: their
    // summaries stand, and the exit status is theirs. One that came during
    // an upgrade left its job stopped with the upgrade's savepoint: the
    // signal ended it.
    let signalled = stopped_by.get().is_some();
    let cancelled = ended
        .iter()
        .any(|(_, status, _)| *status == JobStatus::Cancelled || (signalled && *status == JobStatus::Stopped));
    let mut failed = Vec::new();
    for (name, status, summary) in ended {
        match (status, summary) {
            (JobStatus::Failed(reason), _) => failed.push(format!("job `{name}` failed: {reason}")),
            (JobStatus::Cancelled, _) => say!("job `{name}` was cancelled"),
            (_, Some(summary)) => report(&summary, &graph),
            (status, None) => say!("job `{name}`: {status:?}"),
        }
    }
    say!("peak memory: {}", super::peak_memory().unwrap_or_else(|| "unknown".into()));
    if cancelled {
        exit_if_signalled(&stopped_by);
    }
    match failed.len() {
        0 => Ok(()),
        _ => anyhow::bail!(failed.join("\n")),
    }
}

/// On SIGTERM or SIGINT (Ctrl-C), shuts the host down (see
/// [`JobManager::shut_down`]): its jobs are cancelled, as `weir cancel`
/// does, so that the process ends with its state backends closed and its
/// working files removed; each job resumes from its newest checkpoint on
/// the next `weir run`, as after a crash. Handled from before the job is
/// submitted, so that a signal while it starts is too. A second signal ends
/// the process at once. Returns where the signal that came is kept.
fn shut_down_on_signals(manager: &Arc<JobManager>) -> anyhow::Result<Arc<OnceLock<i32>>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("cannot handle SIGTERM and SIGINT")?;
    let stopped_by = Arc::new(OnceLock::new());
    let (manager, stopping) = (Arc::clone(manager), Arc::clone(&stopped_by));
    std::thread::Builder::new().name("weir-signals".into()).spawn(move || {
        for signal in signals.forever() {
            if stopping.set(signal).is_err() {
                say!("weir: signal {signal} again: exiting now");
                std::process::exit(128 + signal);
            }
            let name = if signal == SIGTERM { "SIGTERM" } else { "SIGINT" };
            say!("weir: {name}: cancelling the jobs; each resumes from its newest checkpoint on the next `weir run` (again to exit now)");
            manager.shut_down();
        }
    })?;
    Ok(stopped_by)
}

/// Exits as a shell reports a process a signal ended, if one came.
fn exit_if_signalled(stopped_by: &OnceLock<i32>) {
    if let Some(signal) = stopped_by.get() {
        std::process::exit(128 + signal);
    }
}

/// Says so when `-p p` changes nothing: every source and operator of
/// `graph` sets its own parallelism (as a fork's job file does).
fn say_if_unused(graph: &JobGraph, p: u32) {
    let scaled = graph.nodes.iter().any(|node| !matches!(node.kind, NodeKind::Sink(_)) && node.parallelism == p);
    if !scaled {
        say!(
            "weir: -p {p} changes nothing: every source and operator sets its own `parallelism` in the job file \
             (a fork's job file sets them all); edit those to change them"
        );
    }
}

/// The savepoint in `dir` — or, for a retained checkpoint (`chk-N`), one
/// written of it — noting when it is another job's: restoring one into a
/// fork or a new version of a job is the point of savepoints, but a wrong
/// directory given by mistake should not pass unseen.
fn open_savepoint(
    dir: &Path,
    graph: &JobGraph,
    engine: &PluginEngine,
    manager: &JobManager,
    allow_non_restored: bool,
) -> anyhow::Result<Savepoint> {
    let savepoint = match is_retained_checkpoint(dir) {
        true => {
            let savepoint = manager.savepoint_of_checkpoint(dir, graph, allow_non_restored)?;
            let kept = match graph.checkpoints {
                Some(_) => "which the host deletes once the job has checkpoints of its own and newer ones replace it",
                None => "the newest 5 of which the host keeps",
            };
            say!("weir: starting from checkpoint {} (written as savepoint {}, {kept})", dir.display(), savepoint.dir.display());
            savepoint
        }
        false => Savepoint::open(dir)?,
    };
    let taken_of = &savepoint.manifest.job;
    if *taken_of != graph.name {
        say!(
            "weir: savepoint {} was taken of job `{taken_of}`; restoring it into job `{}` (state is matched by \
             operator uid and source name)",
            dir.display(),
            graph.name
        );
    }
    say_other_plugins(&savepoint, graph, engine);
    Ok(savepoint)
}

/// Whether `dir`, given to `--from-savepoint`, is one retained checkpoint
/// (`chk-N`, and not a savepoint that happens to be named so).
fn is_retained_checkpoint(dir: &Path) -> bool {
    CheckpointStorage::of_checkpoint(dir).is_some() && !dir.join(MANIFEST_FILE).exists()
}

/// Notes each operator that restores with another plugin than the one the
/// savepoint was taken with: the job file's wins (so a job upgraded before
/// its savepoint goes back to the plugin its file names, unless the file
/// is changed too), and its state is checked against it before it starts
/// (by the same [`changed_plugins`](weir::dataflow::changed_plugins), whose
/// plugins the engine then has compiled; one that cannot be loaded is
/// reported there).
fn say_other_plugins(savepoint: &Savepoint, graph: &JobGraph, engine: &PluginEngine) {
    let wrote = |uid: &str| WrittenBy::of_savepoint(savepoint, uid);
    for (uid, now) in weir::dataflow::changed_plugins(graph, engine, wrote).unwrap_or_default() {
        let Some(then) = savepoint.manifest.operator(&uid) else { continue };
        // The same plugin configured otherwise; or a savepoint that does
        // not record the digest, where the same file is taken for the same
        // plugin.
        let same_plugin = wrote(&uid).is_some_and(|wrote| wrote.same_plugin(&now.digest));
        if same_plugin || (then.plugin_sha256.is_none() && then.plugin == now.path) {
            continue;
        }
        say!(
            "weir: operator `{uid}` restores with {} (named in the job file); the savepoint was taken with {} — name \
             that one in the job file to keep it",
            now.path.display(),
            then.plugin.display()
        );
    }
}

/// Serves the control API on `requested` (the address, and the flag or
/// variable that gave it), or on the default address — or any free port
/// if another host has that one — to requests with the token in
/// `WEIR_API_TOKEN`, if it is set.
fn serve(requested: Option<(&str, &str)>, manager: &Arc<JobManager>) -> anyhow::Result<ApiServer> {
    let plane = Arc::new(manager.clone());
    let token = ApiToken::from_env();
    if let Some((addr, from)) = requested {
        // Its error names the address and says why; an address asked for
        // is not swapped for another behind the user's back.
        return ApiServer::start(addr, plane, token).map_err(|error| match error.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "{error} (the address {from} gives). Another weir host may be serving there (`weir jobs --api {addr}` \
                 asks it) — perhaps running this job already; to run another host beside it, give it an address of \
                 its own with --api (`--api 127.0.0.1:0` takes any free port){}",
                if from == "$WEIR_API" { ", or unset WEIR_API for the default (127.0.0.1:7070, else any free port)" } else { "" }
            ),
            _ => error.into(),
        });
    }
    ApiServer::start(DEFAULT_API_ADDR, plane.clone(), token.clone())
        .or_else(|_| ApiServer::start("127.0.0.1:0", plane, token))
        .context("cannot serve the control API on localhost")
}

/// What became of a job that ran to its end (or stopped with a savepoint).
fn report(summary: &JobSummary, graph: &JobGraph) {
    let name = &summary.name;
    if summary.already_finished {
        let dir = graph.checkpoints.as_ref().map(|c| c.dir.display().to_string()).unwrap_or_default();
        say!(
            "job `{name}` had already finished (checkpoint {} in {dir}); nothing to do. \
             To run it again from the start, move that directory and the sinks' output away.",
            summary.restored_from.unwrap_or_default()
        );
        return;
    }
    if let Some(savepoint) = &summary.stopped_with {
        say!("job `{name}` stopped with savepoint {}", savepoint.dir.display());
        return;
    }
    match (&summary.savepoint, summary.restored_from) {
        (Some(savepoint), _) => say!("job `{name}` started from savepoint {}", savepoint.display()),
        (None, Some(checkpoint)) => say!("job `{name}` resumed from checkpoint {checkpoint}"),
        (None, None) => {}
    }
    say!(
        "job `{name}` finished in {:.2} s: {} events read, {} written{}",
        summary.duration.as_secs_f64(),
        summary.records_read(),
        summary.records_written(),
        match summary.restarts {
            0 => String::new(),
            n if graph.checkpoints.is_some() => {
                format!(" ({n} restart(s) after failures; the figures are the last run's, from its checkpoint on)")
            }
            n => format!(" ({n} restart(s) after failures; the figures are the last run's, from the beginning)"),
        }
    );
    let checkpoints = &summary.checkpoints;
    if (checkpoints.count() > 0 || checkpoints.failed() > 0) && graph.checkpoints.is_some() {
        say!("{}", super::checkpoint_figures(&summary.checkpoints));
    }
    // Where its time went, node by node, and what state it holds, as
    // `weir jobs JOB` shows a running job.
    let nodes = summary.nodes();
    say!("{}", super::control::nodes_table(&nodes, false).trim_end());
    let state = super::control::state_sizes(&nodes);
    if !state.is_empty() {
        say!("{}", state.trim_end());
    }
}

