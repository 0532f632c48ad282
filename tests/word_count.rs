//! The word-count job end to end: real plugins built from source, a real
//! file, the `weir` binary; every count checked exactly.

mod common;

use std::collections::BTreeMap;

use common::{JobDir, plugin, run_job, toml_path};

/// Words `w1` … `w60`, word `wN` appearing exactly N times, in a scrambled
/// order, with mixed case and punctuation that tokenize must strip.
fn text_with_known_counts() -> (String, BTreeMap<String, u64>) {
    let mut words = Vec::new();
    let mut expected = BTreeMap::new();
    for n in 1..=60u64 {
        expected.insert(format!("w{n}"), n);
        for i in 0..n {
            words.push(if i % 3 == 0 { format!("W{n},") } else { format!("w{n}") });
        }
    }
    // A fixed permutation (multiplicative stepping through a prime length).
    let len = words.len();
    let mut scrambled = Vec::with_capacity(len);
    let mut index = 0usize;
    for _ in 0..len {
        index = (index + 7919) % len;
        scrambled.push(words[index].clone());
    }
    let lines: Vec<String> = scrambled.chunks(7).map(|c| c.join(" ")).collect();
    (lines.join("\n") + "\n", expected)
}

/// The text file source of the word-count tests.
const FILE_SOURCE: &str = "[[source]]\nname = \"lines\"\ntype = \"file\"\npath = \"input.txt\"\n";

/// tokenize → key_by → count → file sink `out/counts.txt`, fed by `source`
/// (a `[[source]]` table named `lines`).
fn word_count_job(dir: &JobDir, parallelism: u32, source: &str) -> std::path::PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "word-count"
parallelism = {parallelism}

{source}

[[operator]]
uid = "tokenize"
plugin = {tokenize}
inputs = ["lines"]

[[operator]]
uid = "count"
plugin = {count}
inputs = ["tokenize"]
key_by = true

[[sink]]
name = "out"
type = "file"
input = "count"
path = "out/counts.txt"
"#,
            tokenize = toml_path(&plugin("tokenize")),
            count = toml_path(&plugin("word-count")),
        ),
    )
}

/// Per word, the counts emitted, in order.
fn updates(output: &str) -> BTreeMap<String, Vec<u64>> {
    let mut updates: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in output.lines() {
        let (word, count) = line.split_once('\t').unwrap_or_else(|| panic!("not key<TAB>value: {line:?}"));
        updates.entry(word.to_owned()).or_default().push(count.parse().expect("a count"));
    }
    updates
}

fn check_counts(parallelism: u32) {
    let dir = JobDir::new();
    let (text, expected) = text_with_known_counts();
    dir.write("input.txt", &text);
    run_job(&word_count_job(&dir, parallelism, FILE_SOURCE), &[]).success();

    let updates = updates(&dir.read("out/counts.txt"));
    assert_eq!(updates.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "the set of words");
    for (word, total) in &expected {
        // One update per occurrence, counting up from 1 without gaps.
        assert_eq!(updates[word], (1..=*total).collect::<Vec<_>>(), "updates of {word}");
    }
}

#[test]
fn counts_every_word_exactly_at_parallelism_1() {
    check_counts(1);
}

#[test]
fn counts_are_identical_at_parallelism_2() {
    check_counts(2);
}

#[test]
fn counts_are_identical_at_parallelism_4() {
    check_counts(4);
}

#[test]
fn parallelism_flag_overrides_the_job_file() {
    let dir = JobDir::new();
    let (text, expected) = text_with_known_counts();
    dir.write("input.txt", &text);
    let run = run_job(&word_count_job(&dir, 1, FILE_SOURCE), &["--parallelism", "3"]);
    run.success();
    let finals: BTreeMap<String, u64> =
        updates(&dir.read("out/counts.txt")).into_iter().map(|(w, c)| (w, *c.last().unwrap())).collect();
    assert_eq!(finals, expected);
    // At the end, each node's figures over the run: the file source has
    // one subtask, the operators 3, each on a thread with processor time.
    let table = final_table(&run.stderr());
    let subtasks_and_cpu = |r: &Vec<String>| (r[2].clone(), r[12].clone());
    let rows: Vec<_> = table.iter().map(subtasks_and_cpu).collect();
    assert_eq!(rows, [("1", "%"), ("3", "%"), ("3", "%"), ("1", "%")].map(|(n, c)| (n.to_owned(), c.to_owned())));

    // At parallelism 1, `tokenize` is chained into the source's thread and
    // the sink into `count`'s: no processor time of their own (CPU "-");
    // their time is their upstream's. The output is the same.
    let chained = JobDir::new();
    chained.write("input.txt", &text);
    let run = run_job(&word_count_job(&chained, 1, FILE_SOURCE), &[]);
    let table = final_table(&run.success().stderr());
    assert_eq!((table[1][1].as_str(), table[1][11].as_str()), ("`tokenize`", "-"), "{table:?}");
    assert_eq!((table[3][1].as_str(), table[3][11].as_str()), ("`out`", "-"), "{table:?}");
    assert_eq!((table[0][12].as_str(), table[2][12].as_str()), ("%", "%"), "{table:?}");
    let finals: BTreeMap<String, u64> =
        updates(&chained.read("out/counts.txt")).into_iter().map(|(w, c)| (w, *c.last().unwrap())).collect();
    assert_eq!(finals, expected);
}

/// The rows (source, operators, sink), split into cells, of the table of
/// node figures `weir run` prints when its job ends.
fn final_table(stderr: &str) -> Vec<Vec<String>> {
    assert!(stderr.contains("over its run"), "{stderr}");
    // The table's rows: from its header to the line saying what its rates span.
    let table = stderr.lines().skip_while(|l| !l.starts_with("NODE ")).take_while(|l| !l.starts_with("(IN/S"));
    let rows = table.filter(|l| ["source ", "operator ", "sink "].iter().any(|kind| l.starts_with(kind)));
    rows.map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
}

#[test]
fn json_lines_source_keys_events_and_stdout_sink_prints_them() {
    let dir = JobDir::new();
    dir.write(
        "events.jsonl",
        "{\"key\":\"b\",\"value\":\"x\",\"timestamp\":1}\n{\"key\":\"a\",\"value\":7}\n\n{\"key\":\"b\",\"value\":\"y\"}\n",
    );
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "json-count"
[[source]]
name = "events"
type = "file"
path = "events.jsonl"
format = "json"

[[operator]]
uid = "count"
plugin = {count}
inputs = ["events"]
key_by = true

[[sink]]
name = "out"
type = "stdout"
input = "count"
format = "json"
"#,
            count = toml_path(&plugin("word-count")),
        ),
    );
    let run = run_job(&job, &[]);
    run.success();
    let lines: Vec<serde_json::Value> = run.stdout().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines,
        vec![
            serde_json::json!({"key": "b", "value": "1", "timestamp": 1}),
            serde_json::json!({"key": "a", "value": "1", "timestamp": null}),
            serde_json::json!({"key": "b", "value": "2", "timestamp": null}),
        ]
    );
}

#[test]
fn generator_jobs_are_deterministic() {
    let run_once = || {
        let dir = JobDir::new();
        let source = "[[source]]\nname = \"lines\"\ntype = \"generator\"\nmode = \"words\"\nevents = 2000\nseed = 7\n";
        let job = word_count_job(&dir, 2, source);
        run_job(&job, &[]).success();
        let finals: BTreeMap<String, u64> =
            updates(&dir.read("out/counts.txt")).into_iter().map(|(w, c)| (w, *c.last().unwrap())).collect();
        finals
    };
    let first = run_once();
    assert!(first.len() > 10, "the vocabulary shows up: {first:?}");
    assert_eq!(first, run_once());
}
