//! Bad modules and bad job files: each gets a clear error that names the
//! culprit and says what to do, and never a panic.

mod common;

use std::path::Path;

use common::{JobDir, plugin, run_job, toml_path, weir};

/// A one-operator job (generator → operator → discard) using `plugin_path`.
fn job_with_plugin(dir: &JobDir, plugin_path: &Path) -> std::path::PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "bad-plugin"
[[source]]
name = "gen"
type = "generator"
events = 10

[[operator]]
uid = "suspect"
plugin = {plugin}
inputs = ["gen"]

[[sink]]
name = "out"
type = "discard"
input = "suspect"
"#,
            plugin = toml_path(plugin_path)
        ),
    )
}

fn component_from_wat(dir: &JobDir, name: &str, text: &str) -> std::path::PathBuf {
    let bytes = wat::parse_str(text).expect("valid WAT");
    let path = dir.path(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A component exporting the operator interface with each of its functions
/// by name, all lifted from core function `f` of `module` — with the wrong
/// types, found only when it is instantiated — after `imports`.
fn operator_by_name(imports: &str, module: &str) -> String {
    let functions = ["init", "process", "on-timer", "flush", "check-state"];
    let lifted: String = functions.iter().map(|f| format!("(func ${f} (canon lift (core func $i \"f\")))\n")).collect();
    let exported: String = functions.iter().map(|f| format!("(export \"{f}\" (func ${f}))")).collect();
    format!(
        r#"(component
            {imports}
            (core module $m {module})
            (core instance $i (instantiate $m))
            {lifted}
            (instance $api {exported})
            (export "weir:operator/operator@0.5.2" (instance $api)))"#
    )
}

/// A component exporting one interface `name` with one function `init`.
fn component_exporting(name: &str) -> String {
    format!(
        r#"(component
            (core module $m (func (export "init")))
            (core instance $i (instantiate $m))
            (func $init (canon lift (core func $i "init")))
            (instance $api (export "init" (func $init)))
            (export "{name}" (instance $api)))"#
    )
}

#[test]
fn a_file_that_is_not_wasm() {
    let dir = JobDir::new();
    let path = dir.write("plugin.wasm", "this is not WebAssembly");
    let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("is not a WebAssembly file"), "{error}");
    assert!(error.contains("wasm32-wasip2"), "says how to build one: {error}");
    let error = weir(&["plugin", "check", path.to_str().unwrap()]).failure();
    assert!(error.contains("is not a WebAssembly file"), "{error}");
}

#[test]
fn a_core_module_that_is_not_a_component() {
    let dir = JobDir::new();
    let path = dir.path("core.wasm");
    std::fs::write(&path, wat::parse_str("(module (func (export \"f\")))").unwrap()).unwrap();
    let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("is a core WebAssembly module, not a component"), "{error}");
    assert!(error.contains("wasm32-wasip2"), "{error}");
}

#[test]
fn a_component_for_another_world() {
    let dir = JobDir::new();
    let path = component_from_wat(&dir, "other.wasm", &component_exporting("example:other/api@1.0.0"));
    let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("is a component but not a Weir operator"), "{error}");
    assert!(error.contains("example:other/api@1.0.0"), "lists what it exports: {error}");
    assert!(error.contains("weir:operator/operator@0.5.2"), "says what is expected: {error}");
    assert!(error.contains("the crate calls `weir_sdk::export_operator!(YourOperator)`"), "and how: {error}");

    let check = weir(&["plugin", "check", path.to_str().unwrap()]);
    assert!(check.stdout().contains("example:other/api@1.0.0 (interface): init"), "{}", check.stdout());
    check.failure();
}

#[test]
fn components_built_against_an_older_or_newer_wit_version() {
    let dir = JobDir::new();
    for version in ["0.4.0", "0.6.0"] {
        let path = component_from_wat(&dir, &format!("{version}.wasm"), &component_exporting(&format!("weir:operator/operator@{version}")));
        let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
        assert!(error.contains(&format!("was built against weir:operator@{version}")), "{error}");
        assert!(error.contains("this host implements weir:operator@0.5.2"), "{error}");
    }
}

/// A plugin built against 0.5.0, before 0.5.1 added `map-state.entries`
/// and `map-state.clear`, runs on this host as it did (only what it
/// imports must be there), and `weir plugin check` names its version.
#[test]
fn a_plugin_built_against_an_earlier_patch_version_runs() {
    let old = common::workspace().join("tests/fixtures/word-count-wit-0.5.0.wasm");
    let check = weir(&["plugin", "check", old.to_str().unwrap()]);
    assert!(check.success().stdout().contains("ok: implements the weir:operator@0.5.0 plugin world"), "{}", check.stdout());
    let dir = JobDir::new();
    let job = format!(
        "name = \"old-plugin\"\n\
         [[source]]\nname = \"gen\"\ntype = \"generator\"\nevents = 1000\nkeys = 2\n\
         [[operator]]\nuid = \"count\"\nplugin = {}\ninputs = [\"gen\"]\nkey_by = true\n\
         [[sink]]\nname = \"out\"\ntype = \"file\"\npath = \"out.txt\"\ninput = \"count\"\n",
        toml_path(&old)
    );
    run_job(&dir.write("job.toml", &job), &[]).success();
    let out = dir.read("out.txt");
    let totals: Vec<&str> = out.lines().filter(|line| line.ends_with("\t500")).collect();
    assert_eq!(totals.len(), 2, "each of the two keys counted to 500: {out}");
}

/// A component exporting every function of the world by name, each of
/// the wrong type: `weir plugin check` says so (it said "ok"), and a run
/// says what to do.
#[test]
fn a_component_whose_functions_have_the_wrong_types() {
    let dir = JobDir::new();
    let text = operator_by_name("", r#"(func (export "f"))"#);
    let path = component_from_wat(&dir, "mistyped.wasm", &text);
    let error = weir(&["plugin", "check", path.to_str().unwrap()]).failure();
    assert!(error.contains("its exports do not have the types of the weir:operator@0.5.2 plugin world"), "{error}");
    let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("rebuild it against that WIT"), "{error}");
}

/// `weir plugin check` runs a component's start-up code (its core modules'
/// start functions) under a job's default memory cap and deadline, or
/// those given: a platform vetting uploaded plugins with it ran them
/// unbounded (the sandbox audit: a start looping for ever hung the check,
/// one filling 3 GiB passed it).
#[test]
fn plugin_check_bounds_a_components_start_up_code() {
    let dir = JobDir::new();
    let with_start = |name: &str, start: &str| {
        let text = operator_by_name("", &format!(r#"(memory 1) (func $start {start}) (start $start) (func (export "f"))"#));
        component_from_wat(&dir, name, &text)
    };
    let hog = with_start("hog.wasm", "(drop (memory.grow (i32.const 8192)))");
    let error = weir(&["plugin", "check", hog.to_str().unwrap()]).failure();
    assert!(error.contains("it fails as it starts, before any call"), "{error}");
    assert!(error.contains("exceeded its memory cap of 512 MiB in its start-up code (it asked for 513 MiB)"), "{error}");
    // A plugin its job gives more starts under as much: then only the
    // types of its (made-up) exports are wrong.
    let error = weir(&["plugin", "check", hog.to_str().unwrap(), "--memory-limit-mb", "1024"]).failure();
    assert!(error.contains("its exports do not have the types") && !error.contains("memory cap"), "{error}");

    let spin = with_start("spin.wasm", "(loop $l (br $l))");
    let error = weir(&["plugin", "check", spin.to_str().unwrap()]).failure();
    assert!(error.contains("its start-up code exceeded its deadline of 10000 ms"), "{error}");
}

/// A plugin importing what the host does not give (an HTTP client's
/// import) is refused naming the import and why, where it was called "not
/// a Weir operator" and told to export the operator it exports (found by
/// the sandbox audit).
#[test]
fn a_component_importing_what_the_host_does_not_give() {
    let dir = JobDir::new();
    let http_client = r#"(import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func))))"#;
    let text = operator_by_name(http_client, r#"(func (export "f"))"#);
    let path = component_from_wat(&dir, "http.wasm", &text);
    let error = weir(&["plugin", "check", path.to_str().unwrap()]).failure();
    assert!(error.contains("imports `wasi:http/outgoing-handler@0.2.0`, which a Weir host does not give its plugins"), "{error}");
    assert!(!error.contains("not a Weir operator"), "{error}");
}

#[test]
fn a_component_with_the_right_name_but_wrong_functions() {
    let dir = JobDir::new();
    let path = component_from_wat(&dir, "wrong.wasm", &component_exporting("weir:operator/operator@0.5.2"));
    let error = run_job(&job_with_plugin(&dir, &path), &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("not a Weir operator"), "{error}");
}

#[test]
fn a_missing_plugin_path() {
    let dir = JobDir::new();
    let job = job_with_plugin(&dir, &dir.path("nowhere/op.wasm"));
    // With checkpoints and a files sink: the failed start leaves no
    // directories behind (it made empty ones, with lock files).
    let text = std::fs::read_to_string(&job).unwrap();
    let text = text.replace("name = \"bad-plugin\"", "name = \"bad-plugin\"\ncheckpoint_dir = \"ck\"");
    std::fs::write(&job, text.replace("type = \"discard\"", "type = \"files\"\npath = \"out\"")).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `suspect`"), "{error}");
    assert!(error.contains("nowhere/op.wasm"), "{error}");
    assert!(error.contains("check the path (an operator's `plugin` in the job file"), "{error}");
    let left = || std::fs::read_dir(dir.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>();
    assert!(!dir.path("ck").exists() && !dir.path("out").exists(), "{:?}", left());
    // Nor does a plugin that is there but is not one.
    std::fs::create_dir(dir.path("nowhere")).unwrap();
    std::fs::write(dir.path("nowhere/op.wasm"), "not wasm").unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("is not a WebAssembly file"), "{error}");
    assert!(!dir.path("ck").exists() && !dir.path("out").exists(), "{:?}", left());
}

/// A device, a directory or a named pipe as the plugin or the job file is
/// refused, not read without end (`/dev/zero` grew the host by gigabytes a
/// second) nor waited on (a pipe with no writer).
#[test]
fn a_device_or_directory_is_neither_a_plugin_nor_a_job_file() {
    let dir = JobDir::new();
    let fifo = dir.path("pipe.wasm");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for path in [Path::new("/dev/zero"), dir.dir.path(), &fifo] {
        let error = run_job(&job_with_plugin(&dir, path), &[]).failure();
        assert!(error.contains("operator `suspect`") && error.contains("it is not a regular file"), "{error}");
        let error = weir(&["plugin", "check", path.to_str().unwrap()]).failure();
        assert!(error.contains("it is not a regular file"), "{error}");
        let error = run_job(path, &[]).failure();
        assert!(error.contains("cannot read job file") && error.contains("it is not a regular file"), "{error}");
    }
}

/// A `checkpoint_dir` that cannot be a directory is refused as the job
/// file loads, saying what is in the way; a lock file that cannot be
/// locked is named.
#[test]
fn a_checkpoint_dir_in_the_way_is_named() {
    let dir = JobDir::new();
    let text = std::fs::read_to_string(job_with_plugin(&dir, &plugin("word-count"))).unwrap();
    let job = dir.write("job.toml", &text.replace("name = \"bad-plugin\"", "name = \"bad-plugin\"\ncheckpoint_dir = \"ckpt\""));
    std::fs::write(dir.path("ckpt"), "").unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("`checkpoint_dir`: ") && error.contains("ckpt is a file where a directory must go"), "{error}");
    std::fs::remove_file(dir.path("ckpt")).unwrap();
    std::os::unix::fs::symlink(dir.path("nowhere"), dir.path("ckpt")).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("ckpt is a symbolic link to") && error.contains("nowhere, which does not exist"), "{error}");
    std::fs::remove_file(dir.path("ckpt")).unwrap();
    std::fs::create_dir_all(dir.path("ckpt/LOCK")).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("cannot lock") && error.contains("ckpt/LOCK"), "{error}");
}

#[test]
fn plugin_check_lists_exports_and_imports_of_a_good_plugin() {
    let run = weir(&["plugin", "check", plugin("word-count").to_str().unwrap()]);
    run.success();
    let out = run.stdout();
    assert!(out.contains("weir:operator/operator@0.5.2 (interface): init, process"), "{out}");
    assert!(out.contains("weir:operator/state@0.5.2 (interface)"), "{out}");
    assert!(out.contains("ok: implements the weir:operator@0.5.2 plugin world"), "{out}");
}

/// A valid one-operator job, with `edit` applied to its text.
fn job_file(dir: &JobDir, edit: impl FnOnce(String) -> String) -> std::path::PathBuf {
    let base = format!(
        r#"name = "edited"

[[source]]
name = "gen"
type = "generator"
events = 10

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["gen"]
key_by = true

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
        plugin = toml_path(&plugin("word-count"))
    );
    dir.write("job.toml", &edit(base))
}

#[test]
fn the_unedited_job_file_runs() {
    let dir = JobDir::new();
    run_job(&job_file(&dir, |t| t), &[]).success();
}

#[test]
fn a_job_file_with_a_syntax_error() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("events = 10", "events = = 10"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("job.toml is not valid"), "{error}");
    assert!(error.contains("line 6"), "points at the line: {error}");
}

#[test]
fn a_job_file_with_an_unknown_field() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("key_by = true", "key_by = true\nparalelism = 2"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("unknown field `paralelism`"), "{error}");
    assert!(error.contains("parallelism"), "lists the fields it knows: {error}");
}

#[test]
fn watermark_settings_on_a_source_without_event_time() {
    let dir = JobDir::new();
    let aligned = "events = 10\nwatermark_alignment = { max_drift_ms = 1000 }";
    let job = job_file(&dir, |t| t.replace("events = 10", aligned));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("source `gen` has `watermark_alignment`, but its events have no event time"), "{error}");
    assert!(error.contains("events_per_ms"), "says how to give them one: {error}");
    let job = job_file(&dir, |t| t.replace("events = 10", &format!("{aligned}\nevents_per_ms = 1")));
    run_job(&job, &[]).success();
    // A bound on disorder is as meaningless without event time, and
    // would otherwise be silently ignored.
    let job = job_file(&dir, |t| t.replace("events = 10", "events = 10\nout_of_orderness_ms = 100"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("source `gen` has `out_of_orderness_ms`, but its events have no event time to bound"), "{error}");
    assert!(error.contains("or remove the setting"), "{error}");
    // Idleness is not refused: a source without timestamps beside one
    // with them holds the operator's event time back until it is idle
    // (tests/event_time.rs).
    let job = job_file(&dir, |t| t.replace("events = 10", "events = 10\nidle_timeout_ms = 100"));
    run_job(&job, &[]).success();
}

#[test]
fn an_operator_reading_from_an_input_that_does_not_exist() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("inputs = [\"gen\"]", "inputs = [\"generator\"]"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `count` reads from `generator`"), "{error}");
    assert!(error.contains("not a source or operator of this job (known: gen)"), "{error}");
}

#[test]
fn a_sink_reading_from_an_input_that_does_not_exist() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("input = \"count\"", "input = \"counter\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` reads from `counter`"), "{error}");
    // An empty side-output name was read as the main output.
    let job = job_file(&dir, |t| t.replace("input = \"count\"", "input = \"count.\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` reads from `count.`, which names no side output after the `.`"), "{error}");
}

#[test]
fn an_operator_listing_an_input_twice() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("key_by = true", "key_by = true\nbroadcast = [\"gen\"]"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `count` lists `gen` both in `inputs` and in `broadcast`"), "{error}");
    let job = job_file(&dir, |t| t.replace("inputs = [\"gen\"]", "inputs = [\"gen\", \"gen\"]"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `count` lists `gen` twice: list each input once"), "{error}");
}

#[test]
fn operators_forming_a_cycle() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| {
        let extra = format!(
            "\n[[operator]]\nuid = \"echo\"\nplugin = {}\ninputs = [\"count\"]\n",
            toml_path(&plugin("word-count"))
        );
        t.replace("inputs = [\"gen\"]", "inputs = [\"gen\", \"echo\"]") + &extra
    });
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operators form a cycle"), "{error}");
    assert!(error.contains("`count` → `echo` → `count`"), "{error}");
}

#[test]
fn duplicate_names_and_bad_parallelism() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("name = \"out\"", "name = \"gen\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("the name `gen` is used twice"), "{error}");

    // Names name checkpoint files: a long one would fail every checkpoint.
    let long = "c".repeat(300);
    let job = job_file(&dir, |t| t.replace("uid = \"count\"", &format!("uid = \"{long}\"")).replace("input = \"count\"", &format!("input = \"{long}\"")));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("is 300 bytes long; at most 200 (it names checkpoint files)"), "{error}");
    let job = job_file(&dir, |t| t.replace("uid = \"count\"", "uid = \"a/b\"").replace("input = \"count\"", "input = \"a/b\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator uid \"a/b\" must be non-empty and must not contain '.', '/'"), "{error}");

    let job = job_file(&dir, |t| t.replace("name = \"edited\"", "name = \"edited\"\nparallelism = 0"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("parallelism 0"), "{error}");

    let flag = run_job(&job_file(&dir, |t| t), &["-p", "0"]);
    assert_eq!(flag.output.status.code(), Some(2), "a usage error, not the job file's: {}", flag.stderr());
    assert!(flag.stderr().contains("invalid value '0' for '--parallelism"), "{}", flag.stderr());

    // `-p` is the default parallelism: where every node sets its own, it
    // changes nothing, and says so.
    let pinned = job_file(&dir, |t| t.replace("events = 10", "events = 10\nparallelism = 1").replace("key_by = true", "key_by = true\nparallelism = 2"));
    let run = run_job(&pinned, &["-p", "3"]);
    assert!(run.success().stderr().contains("-p 3 changes nothing: every source and operator sets its own"), "{}", run.stderr());
}

#[test]
fn source_numbers_a_source_cannot_run_with() {
    let dir = JobDir::new();
    for (setting, expected) in [
        ("rate = 0.0", "source `gen`: `rate = 0` must be a positive number"),
        ("rate = -5.0", "source `gen`: `rate = -5` must be a positive number"),
        ("rate = nan", "source `gen`: `rate = NaN` must be a positive number"),
        ("mode = \"sensors\"\nspeed = 0.0", "source `gen`: `speed = 0` must be a positive number"),
        ("keys = 0", "source `gen`: `keys` must be at least 1"),
        ("events_per_ms = 0", "source `gen`: `events_per_ms` must be at least 1"),
        ("seed = 7", "source `gen`: `seed` does nothing in `sequence` mode"),
        ("shuffle_ms = 100", "source `gen`: `shuffle_ms` does nothing in `sequence` mode"),
        ("mode = \"words\"\nkeys = 5", "source `gen`: `keys` does nothing in `words` mode"),
        ("mode = \"sensors\"\nevents_per_ms = 5", "source `gen`: `events_per_ms` does nothing in `sensors` mode"),
        ("mode = \"logins\"\nspeed = 2.0", "source `gen` has `speed`, but its events have no event time"),
    ] {
        let job = job_file(&dir, |t| t.replace("events = 10", &format!("events = 10\n{setting}")));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains(expected), "{setting}: {error}");
    }
}

#[test]
fn a_discard_sink_rate_it_cannot_run_with_is_refused_as_the_job_loads() {
    let dir = JobDir::new();
    for rate in ["0.0", "-5.0", "nan", "inf"] {
        let job = job_file(&dir, |t| t.replace("type = \"discard\"", &format!("type = \"discard\"\nrate = {rate}")));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains("sink `out`: `rate = ") && error.contains("must be a positive number"), "{rate}: {error}");
        assert!(!error.contains("panicked"), "{rate}: {error}");
    }
}

#[test]
fn rolling_settings_a_files_sink_cannot_run_with() {
    let dir = JobDir::new();
    for setting in ["roll_interval_ms", "roll_size_mb"] {
        let sink = format!("type = \"files\"\npath = \"out\"\n{setting} = 0");
        let job = job_file(&dir, |t| t.replace("type = \"discard\"", &sink));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains(&format!("sink `out`: `{setting}` must be at least 1")), "{setting}: {error}");
    }
    let job = job_file(&dir, |t| t.replace("type = \"discard\"", "type = \"files\"\npath = \"out\"\nroll_after_ms = 5"));
    assert!(run_job(&job, &[]).failure().contains("roll_after_ms"), "an unknown field is named");
    let huge = "type = \"files\"\npath = \"out\"\nroll_size_mb = 17592186044416";
    let error = run_job(&job_file(&dir, |t| t.replace("type = \"discard\"", huge)), &[]).failure();
    assert!(error.contains("`roll_size_mb` may be at most 1073741824 (1 PiB)"), "{error}");
    let unchecked = "type = \"files\"\npath = \"out\"\nroll_interval_ms = 60000";
    let error = run_job(&job_file(&dir, |t| t.replace("type = \"discard\"", unchecked)), &[]).failure();
    assert!(error.contains("files sink `out` has a rolling policy, but the job takes no checkpoints"), "{error}");
}

#[test]
fn job_names_that_are_not_one_path_component() {
    let dir = JobDir::new();
    for name in ["", "..", "../escape", "a/b"] {
        let job = job_file(&dir, |t| t.replace("name = \"edited\"", &format!("name = {name:?}")));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains(&format!("the job name {name:?} must be non-empty")), "{name}: {error}");
        assert!(error.contains("must not contain `/`"), "{error}");
    }
    let long = "n".repeat(201);
    let job = job_file(&dir, |t| t.replace("name = \"edited\"", &format!("name = {long:?}")));
    assert!(run_job(&job, &[]).failure().contains("the job name is 201 bytes long; at most 200"));
}

#[test]
fn a_restart_setting_its_strategy_does_not_use() {
    let dir = JobDir::new();
    for (table, field, strategy) in [
        ("strategy = \"none\"\ndelay_ms = 500", "delay_ms", "none"),
        ("strategy = \"fixed-delay\"\nmax_delay_ms = 500", "max_delay_ms", "fixed-delay"),
    ] {
        let job = job_file(&dir, |t| t.replace("name = \"edited\"", &format!("name = \"edited\"\n[restart]\n{table}\n")));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains(&format!("`{field}` does nothing with strategy = \"{strategy}\"")), "{error}");
    }
    let backoff = "[restart]\nstrategy = \"exponential-backoff\"\ndelay_ms = 10\nmax_delay_ms = 50\n";
    run_job(&job_file(&dir, |t| t.replace("name = \"edited\"", &format!("name = \"edited\"\n{backoff}"))), &[]).success();
}

#[test]
fn sinks_writing_one_path_or_over_what_the_job_reads() {
    let dir = JobDir::new();
    for other in ["out.txt", "./out.txt", "sub/../out.txt"] {
        let sinks = format!(
            "type = \"file\"\npath = \"out.txt\"\ninput = \"count\"\n\n[[sink]]\nname = \"copy\"\ntype = \"file\"\npath = {other:?}"
        );
        let job = job_file(&dir, |t| t.replace("type = \"discard\"", &sinks));
        let error = run_job(&job, &[]).failure();
        assert!(error.contains(&format!("sinks `out` and `copy` both write to {other}")), "{error}");
        assert!(error.contains("give each its own path"), "{error}");
    }
    // Nor may a sink write over what the job reads: its input, a plugin.
    dir.write("in.txt", "a b\n");
    let source = "name = \"gen\"\ntype = \"file\"\npath = \"in.txt\"";
    let sink = "type = \"file\"\npath = \"./in.txt\"";
    let job = job_file(&dir, |t| t.replace("name = \"gen\"\ntype = \"generator\"\nevents = 10", source).replace("type = \"discard\"", sink));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` would write over source `gen`'s input, ./in.txt"), "{error}");
    assert_eq!(dir.read("in.txt"), "a b\n");
    let sink = format!("type = \"file\"\npath = {}", toml_path(&plugin("word-count")));
    let error = run_job(&job_file(&dir, |t| t.replace("type = \"discard\"", &sink)), &[]).failure();
    assert!(error.contains("sink `out` would write over operator `count`'s plugin"), "{error}");
    // Nor inside a files sink's directory, which holds its part files only.
    let sinks = "type = \"files\"\npath = \"parts\"\ninput = \"count\"\n\n[[sink]]\nname = \"copy\"\ntype = \"file\"\npath = \"parts/all.txt\"";
    let error = run_job(&job_file(&dir, |t| t.replace("type = \"discard\"", sinks)), &[]).failure();
    assert!(error.contains("sink `copy` would write inside files sink `out`'s directory"), "{error}");
    // Nor over the job file itself.
    let job = job_file(&dir, |t| t.replace("type = \"discard\"", "type = \"file\"\npath = \"job.toml\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` would write over the job file itself"), "{error}");
    assert!(dir.read("job.toml").contains("[[sink]]"), "the job file is as it was");
}

/// Empty paths are refused: `checkpoint_dir = ""` was the job file's own
/// folder, whose clean-up deleted what it held under the checkpoints' names.
/// So is a source reading a directory (it failed once the job had started).
#[test]
fn empty_paths_are_refused() {
    let dir = JobDir::new();
    let checkpoints = job_file(&dir, |t| t.replace("name = \"edited\"", "name = \"edited\"\ncheckpoint_dir = \"\""));
    let error = run_job(&checkpoints, &[]).failure();
    assert!(error.contains("`checkpoint_dir` is empty"), "{error}");
    let sink = job_file(&dir, |t| t.replace("type = \"discard\"", "type = \"files\"\npath = \"\""));
    assert!(run_job(&sink, &[]).failure().contains("sink `out` has an empty `path`"));
    let source = job_file(&dir, |t| t.replace("type = \"generator\"\nevents = 10", "type = \"file\"\npath = \"\""));
    assert!(run_job(&source, &[]).failure().contains("source `gen` has an empty `path`"));
    std::fs::create_dir(dir.path("folder")).unwrap();
    let source = job_file(&dir, |t| t.replace("type = \"generator\"\nevents = 10", "type = \"file\"\npath = \"folder\""));
    assert!(run_job(&source, &[]).failure().contains("source `gen` reads folder, which is a directory: name a file"));
}

/// A checkpoint directory's clean-up deletes the files there it does not
/// know: a sink writing inside one lost its committed output (the job
/// still ended well), and a folder of other files taken as one (`"."`)
/// lost what it held under the checkpoints' names (`shared/`). Both are
/// refused, deleting nothing.
#[test]
fn a_sink_inside_a_checkpoint_directory_or_a_folder_of_other_files_as_one() {
    let dir = JobDir::new();
    let inside = "name = \"edited\"\ncheckpoint_dir = \"ck\"";
    let sink = "type = \"files\"\npath = \"ck/shared\"";
    let job = job_file(&dir, |t| t.replace("name = \"edited\"", inside).replace("type = \"discard\"", sink));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` would write inside the job's checkpoint directory, ck/shared"), "{error}");

    // Another job's checkpoint directory, known by its LINEAGE.
    std::fs::create_dir_all(dir.path("other/chk-00000001")).unwrap();
    dir.write("other/LINEAGE", "0123456789abcdef\n");
    let job = job_file(&dir, |t| t.replace("type = \"discard\"", "type = \"file\"\npath = \"other/out.txt\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("sink `out` would write inside it") && error.contains("other"), "{error}");
    assert!(!dir.path("other/out.txt").exists());

    std::fs::create_dir(dir.path("shared")).unwrap();
    dir.write("shared/notes.txt", "mine\n");
    let job = job_file(&dir, |t| t.replace("name = \"edited\"", "name = \"edited\"\ncheckpoint_dir = \".\""));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("it holds files Weir did not write"), "{error}");
    assert!(error.contains("give the job a `checkpoint_dir` of its own"), "{error}");
    assert_eq!(dir.read("shared/notes.txt"), "mine\n", "nothing deleted");
}

/// A job of more operators than a job may have is refused as it loads: a
/// line of 2 000 chained operators overflowed its thread's stack.
#[test]
fn a_job_of_too_many_operators() {
    let dir = JobDir::new();
    let operators: String = (0..1001)
        .map(|i| {
            let input = if i == 0 { "gen".to_owned() } else { format!("op{}", i - 1) };
            format!("[[operator]]\nuid = \"op{i}\"\nplugin = {}\ninputs = [\"{input}\"]\n\n", toml_path(&plugin("tokenize")))
        })
        .collect();
    let job = dir.write(
        "job.toml",
        &format!("name = \"long\"\n[[source]]\nname = \"gen\"\ntype = \"generator\"\nevents = 1\n\n{operators}[[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"op1000\"\n"),
    );
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("the job has 1001 operators, more than the 1000 a job may have"), "{error}");
}

#[test]
fn checkpoint_settings_out_of_range_or_without_a_directory() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t.replace("name = \"edited\"", "name = \"edited\"\ncheckpoint_timeout_ms = 500"));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("tolerable_failed_checkpoints need checkpoint_dir: add it"), "{error}");

    let settings = "name = \"edited\"\ncheckpoint_dir = \"checkpoints\"\ncheckpoint_timeout_ms = 0";
    let job = job_file(&dir, |t| t.replace("name = \"edited\"", settings));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("checkpoint_timeout_ms must be at least 1"), "{error}");
}

#[test]
fn rocksdb_budgets_for_another_backend_or_out_of_range() {
    let dir = JobDir::new();
    let budgets = "name = \"edited\"\n[rocksdb]\nblock_cache_mb = 8\n";
    let job = job_file(&dir, |t| t.replace("name = \"edited\"\n", budgets));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("the [rocksdb] table sets RocksDB's memory, but state_backend is \"memory\""), "{error}");
    assert!(error.contains("set state_backend = \"rocksdb\" or remove the table"), "{error}");

    let rocksdb = "name = \"edited\"\nstate_backend = \"rocksdb\"\n[rocksdb]\n";
    let job = job_file(&dir, |t| t.replace("name = \"edited\"\n", &format!("{rocksdb}write_buffer_mb = 0\n")));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("[rocksdb] write_buffer_mb must be at least 1"), "{error}");

    let job = job_file(&dir, |t| t.replace("name = \"edited\"\n", &format!("{rocksdb}block_cache = 33554432\n")));
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("unknown field `block_cache`"), "{error}");
    assert!(error.contains("block_cache_mb"), "lists the fields it knows: {error}");

    let job = job_file(&dir, |t| t.replace("name = \"edited\"\n", &format!("{rocksdb}hot_entries_mb = 0\nblock_cache_mb = 1\n")));
    run_job(&job, &[]).success();
}

#[test]
fn a_missing_job_file_and_a_missing_input_file() {
    let dir = JobDir::new();
    let error = run_job(&dir.path("absent.toml"), &[]).failure();
    assert!(error.contains("cannot read job file"), "{error}");

    let job = job_file(&dir, |t| {
        t.replace("type = \"generator\"\nevents = 10", "type = \"file\"\npath = \"missing.txt\"")
    });
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("source `gen`: cannot open"), "{error}");
    assert!(error.contains("missing.txt"), "{error}");
}

/// A listing written to a full disk ends the command with a clear error
/// (exit status 1), not a panic; to a closed pipe (`| head`), quietly.
#[test]
fn a_listing_that_cannot_be_written_fails_cleanly() {
    let check = |stdout: std::process::Stdio| {
        let child = std::process::Command::new(common::weir_binary())
            .args(["plugin", "check", plugin("word-count").to_str().unwrap()])
            .stdout(stdout)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let output = child.wait_with_output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (status, stderr) = check(std::fs::File::create("/dev/full").unwrap().into());
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("cannot write to standard output") && !stderr.contains("panicked"), "{stderr}");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let (status, stderr) = check(writer.into());
    assert!(!stderr.contains("panicked"), "{status:?}: {stderr}");
}

/// An API address asked for (`--api` or `WEIR_API`) that another program
/// holds fails the run, saying how to run a host beside it, rather than
/// being swapped for another address behind the user's back.
#[test]
fn an_api_address_in_use_is_refused_with_the_ways_out() {
    let dir = JobDir::new();
    let job = job_file(&dir, |t| t);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let error = run_job(&job, &["--api", &addr]).failure();
    assert!(error.contains(&format!("cannot serve the control API on {addr}")) && error.contains("(the address --api gives)"), "{error}");
    assert!(error.contains("`--api 127.0.0.1:0` takes any free port") && !error.contains("WEIR_API"), "{error}");
    let output = std::process::Command::new(common::weir_binary())
        .arg("run")
        .arg(&job)
        .env("WEIR_API", &addr)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(the address $WEIR_API gives)") && stderr.contains("or unset WEIR_API"), "{stderr}");
}
