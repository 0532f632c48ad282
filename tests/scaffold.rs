//! `weir plugin new`: a scaffolded plugin — Rust, Python or JavaScript —
//! builds as its README says and runs unmodified.

mod common;

use std::path::Path;
use std::process::Command;

use common::{JobDir, run_job, toml_path, weir};

#[test]
fn a_scaffolded_rust_plugin_builds_and_runs_unmodified() {
    let dir = JobDir::new();
    let base = dir.dir.path().to_str().unwrap().to_owned();
    weir(&["plugin", "new", "my-op", "--lang", "rust", "--dir", &base]).success();
    let project = dir.path("my-op");
    assert!(project.join("README.md").is_file());

    // Build it exactly as its README says (sharing the test build directory).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| common::workspace().join("target"))
        .join("scaffold");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(status.success(), "the scaffolded plugin builds");
    let wasm = target.join("wasm32-wasip2/release/my_op.wasm");
    weir(&["plugin", "check", wasm.to_str().unwrap()]).success();

    counts_a_b_a(&dir, &wasm, "rust");
}

/// Runs a scaffolded plugin (a per-key counter) over keys a, b, a.
fn counts_a_b_a(dir: &JobDir, wasm: &Path, language: &str) {
    dir.write("in.jsonl", "{\"key\":\"a\",\"value\":1}\n{\"key\":\"b\",\"value\":1}\n{\"key\":\"a\",\"value\":1}\n");
    let job = dir.write(
        "job.toml",
        &format!(
            "name = \"scaffolded\"\n[[source]]\nname = \"in\"\ntype = \"file\"\npath = \"in.jsonl\"\nformat = \"json\"\n\n\
             [[operator]]\nuid = \"my-op\"\nplugin = {}\ninputs = [\"in\"]\nkey_by = true\nmemory_limit_mb = 512\n\n\
             [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"my-op\"\n",
            toml_path(wasm)
        ),
    );
    let run = run_job(&job, &[]);
    run.success();
    assert_eq!(run.stdout(), "a\t1\nb\t1\na\t2\n", "{language}");
}

#[test]
fn scaffolded_python_and_javascript_plugins_build_and_run_unmodified() {
    for (language, script) in [("python", "build-python-plugin.sh"), ("js", "build-js-plugin.sh")] {
        let dir = JobDir::new();
        let base = dir.dir.path().to_str().unwrap().to_owned();
        let created = weir(&["plugin", "new", "my-op", "--lang", language, "--dir", &base]).success().stdout();
        let project = dir.path("my-op");
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        // CPython in Wasm needs more memory than the default: the job
        // file snippet says so.
        assert_eq!(readme.contains("memory_limit_mb = 512"), language == "python", "{readme}");
        // Build it exactly as the README says.
        let command = readme.lines().find(|l| l.contains(script)).unwrap_or_else(|| panic!("no build command in {readme}"));
        assert!(created.contains(command.trim()), "{created}");
        let status = Command::new("bash").arg("-c").arg(command.trim()).current_dir(&project).status().unwrap();
        assert!(status.success(), "the scaffolded {language} plugin builds");
        let wasm = project.join("my_op.wasm");
        weir(&["plugin", "check", wasm.to_str().unwrap()]).success();
        counts_a_b_a(&dir, &wasm, language);
    }
}

#[test]
fn scaffolding_says_what_it_cannot_do() {
    let dir = JobDir::new();
    let base = dir.dir.path().to_str().unwrap().to_owned();
    let error = weir(&["plugin", "new", "bad name", "--dir", &base]).failure();
    assert!(error.contains("must start with a letter and be letters"), "{error}");
    let error = weir(&["plugin", "new", "123", "--dir", &base]).failure();
    assert!(error.contains("plugin name \"123\" must start with a letter"), "cargo would refuse it: {error}");
    let error = weir(&["plugin", "new", "weir_sdk", "--dir", &base]).failure();
    assert!(error.contains("is the SDK's own"), "cargo would find two packages of that name: {error}");
    weir(&["plugin", "new", "twice", "--dir", &base]).success();
    let error = weir(&["plugin", "new", "twice", "--dir", &base]).failure();
    assert!(error.contains("already exists"), "{error}");
}

/// Run elsewhere, `bin/weir` of a checkout (here, a link to it, as the
/// README's is) scaffolds against that checkout's SDK.
#[test]
fn scaffolding_finds_the_checkout_of_the_binary_run() {
    let dir = JobDir::new();
    let checkout = dir.path("weir");
    std::fs::create_dir_all(checkout.join("guest-sdk")).unwrap();
    std::fs::write(checkout.join("guest-sdk/Cargo.toml"), "[package]\nname = \"weir-sdk\"\n").unwrap();
    std::fs::create_dir_all(checkout.join("bin")).unwrap();
    std::os::unix::fs::symlink(common::weir_binary(), checkout.join("bin/weir")).unwrap();
    let elsewhere = dir.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let status = Command::new(checkout.join("bin/weir"))
        .args(["plugin", "new", "my-op", "--lang", "rust", "--dir", "."])
        .current_dir(&elsewhere)
        .status()
        .unwrap();
    assert!(status.success());
    let manifest = std::fs::read_to_string(elsewhere.join("my-op/Cargo.toml")).unwrap();
    let sdk = checkout.canonicalize().unwrap().join("guest-sdk");
    assert!(manifest.contains(&format!("path = \"{}\"", sdk.display())), "{manifest}");
}
