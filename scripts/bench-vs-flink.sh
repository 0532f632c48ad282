#!/usr/bin/env bash
# Runs the reference workloads (docs/workloads.md) on Apache Flink and
# on Weir (Wasm plugin and native baseline), back to back on this machine,
# and writes the table to docs/benchmarks.md.
#
#   scripts/bench-vs-flink.sh [EVENTS]      (default 20000000)
#   BACKENDS="memory rocksdb" scripts/bench-vs-flink.sh   (default: both)
#   WEIR_RUNS=5 scripts/bench-vs-flink.sh   (rounds of Weir runs, medians; default 5)
#   CHECKPOINT_EVENTS=N CHECKPOINT_RUNS=3 scripts/bench-vs-flink.sh
#       (Weir's checkpoint table: N events, default 10 × EVENTS, so that a
#       run spans several checkpoints; rounds, default 3)
#
# Weir's memory backend is compared with Flink's hashmap backend, RocksDB
# with RocksDB; both take a checkpoint every second.
#
# Needs the shared/ directory beside the repository (Flink harness). It runs
# scripts/setup.sh first, so that the host and the plugins in
# examples/plugins/ (which `weir bench` takes) are built from this tree, not
# left from an older build. Workloads Weir cannot run yet are listed as such
# rather than skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-20000000}"
runs="${WEIR_RUNS:-5}"
flink=../shared/bench/flink/run.sh
source scripts/lib/bench.sh
scripts/setup.sh
[[ -f $flink ]] || { echo "no Flink harness at $flink" >&2; exit 2; }

# Keeps the RESULT line on stderr (the log) and in $last, and prints its
# events/s. (Not `tee /dev/stderr`: with stderr redirected to a file, that
# reopens and truncates it.)
last=$(mktemp)
trap 'rm -f "$last"' EXIT
rate() {
    local results
    results=$(grep '^RESULT' || true)
    echo "$results" >&2
    echo "$results" >"$last"
    events_per_s <<<"$results"
}
# A field of the last RESULT line (for Weir's cpu_s: its processor time).
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" "$last" | tail -n 1; }
# On a virtual machine the hypervisor may run other tenants on our cores:
# that stolen time moves every figure (a third of the cores' time at
# worst, 2026-12-03). Each run records its share: Weir's RESULT line has
# it (steal_pct), Flink's is read around its run from /proc/stat — the
# machine's time so far, all cores, and the stolen part, in ticks.
machine_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9 }' /proc/stat; }
steal_pct() { awk -v t0="$1" -v s0="$2" -v t1="$3" -v s1="$4" 'BEGIN { if (t1 > t0) printf "%.0f", 100 * (s1 - s0) / (t1 - t0); else print 0 }'; }
flink_steal=()
weir_steal=()
cores=$(nproc)
# Weir runs `runs` rounds per workload and backend. A round runs each
# configuration (P = 1, P = 2, and for the window P = 2 with watermark
# alignment) once with the Wasm plugin and once --native right beside it,
# the configurations back to back. From round to round the order turns
# round (configurations, and Wasm or native first), because the second of
# two runs back to back tends to run a few per cent slower. One run of Weir takes seconds and these machines swing ±50 % from
# minute to minute, so a single run says little, and a ratio of medians may
# compare runs from different minutes: ratios are taken within a round
# (native / Wasm of two runs side by side; P = 2 / P = 1 of the same
# round) and their median is quoted. Flink runs once per figure, its
# P = 1 and P = 2 back to back (its runs are long).
#
# Each Wasm run's processor time says how many cores it kept busy, and so
# how far parallelism could take it on this machine: P = 2 can finish no
# sooner than its processor time spread over all the cores, so within a
# round P = 2 / P = 1 is at most P = 1's seconds over that (`bound`).
declare -A wasm native paired scaling busy bound
# measure WORKLOAD BACKEND CONFIG...: fills the arrays above, by config.
measure() {
    local workload=$1 backend=$2
    shift 2
    local configs=("$@") round config w n
    wasm=() native=() paired=() scaling=() busy=() bound=()
    for round in $(seq "$runs"); do
        local order=("${configs[@]}")
        if ((round % 2 == 0)); then
            order=()
            for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
        fi
        declare -A this=() cpu=()
        for config in "${order[@]}"; do
            local weir=(bin/weir bench "$workload" --events "$events" --backend "$backend" $config)
            if ((round % 2 == 1)); then
                w=$(WEIR_LOG=warn "${weir[@]}" | rate)
                cpu[$config]=$(field cpu_s)
                weir_steal+=("$(field steal_pct)")
                n=$(WEIR_LOG=warn "${weir[@]}" --native | rate)
                weir_steal+=("$(field steal_pct)")
            else
                n=$(WEIR_LOG=warn "${weir[@]}" --native | rate)
                weir_steal+=("$(field steal_pct)")
                w=$(WEIR_LOG=warn "${weir[@]}" | rate)
                cpu[$config]=$(field cpu_s)
                weir_steal+=("$(field steal_pct)")
            fi
            wasm[$config]+=" $w"
            native[$config]+=" $n"
            paired[$config]+=" $(ratio "$n" "$w")"
            this[$config]=$w
            # Cores busy: processor seconds over wall seconds (events / rate).
            busy[$config]+=" $(awk -v c="${cpu[$config]:-0}" -v w="$w" -v e="$events" 'BEGIN { printf "%.2f", c * w / e }')"
        done
        local first=${configs[0]}
        for config in "${configs[@]}"; do
            scaling[$config]+=" $(ratio "${this[$config]}" "${this[$first]}")"
            # P = 1's seconds over this run's processor seconds spread over every core.
            bound[$config]+=" $(awk -v c="${cpu[$config]:-0}" -v w1="${this[$first]}" -v e="$events" -v n="$cores" \
                'BEGIN { if (c > 0 && w1 > 0) printf "%.2f", (e / w1) / (c / n); else print "n/a" }')"
        done
    done
}
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
spread() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 { low = $1 } { high = $1 } END { print low "–" high }'; }

P1="--parallelism 1"
P2="--parallelism 2"
ALIGNED="--parallelism 2 --max-drift-ms 1000"
rows=()
scaling_rows=()
aligned_rows=()
for backend in ${BACKENDS:-memory rocksdb}; do
    flink_backend=$([[ $backend == memory ]] && echo hashmap || echo rocksdb)
    for workload in count window; do
        declare -A flink_rate=()
        for par in 1 2; do
            echo "== Flink: $workload, parallelism $par, $flink_backend" >&2
            before=$(machine_ticks)
            flink_rate[$par]=$(bash "$flink" "$workload" "$events" "$par" "$flink_backend" | rate)
            # shellcheck disable=SC2086 # two numbers each
            flink_steal+=("$(steal_pct $before $(machine_ticks))")
        done
        configs=("$P1" "$P2")
        # The window workload's second source subtask starts N / 20 ms ahead
        # in event time; with watermark alignment it waits instead of
        # filling state.
        [[ $workload == window ]] && configs+=("$ALIGNED")
        echo "== Weir: $workload, $backend, ${#configs[@]} configurations × $runs rounds" >&2
        measure "$workload" "$backend" "${configs[@]}"
        for par in 1 2; do
            config=$([[ $par == 1 ]] && echo "$P1" || echo "$P2")
            w=$(median ${wasm[$config]})
            rows+=("| $workload | $par | $backend / $flink_backend | ${flink_rate[$par]} | $w | $(median ${native[$config]}) | $(ratio "$w" "${flink_rate[$par]}") | $(median ${paired[$config]}) |")
        done
        scaling_rows+=("| $workload | $backend / $flink_backend | $(ratio "${flink_rate[2]}" "${flink_rate[1]}") | $(median ${scaling[$P2]}) | $(median ${scaling[$ALIGNED]:-n/a}) | $(median ${busy[$P1]}) / $(median ${busy[$P2]}) | $(median ${bound[$P2]}) |")
        if [[ $workload == window ]]; then
            a=$(median ${wasm[$ALIGNED]})
            aligned_rows+=("| $backend | $a | $(median ${native[$ALIGNED]}) | $(median ${paired[$ALIGNED]}) | $(ratio "$a" "$(median ${wasm[$P2]})") |")
        fi
    done
done

# Weir with and without checkpoints, at a larger N: the runs above take
# about a second, so at most one checkpoint completes in them. A round runs
# each configuration with checkpoints off and every second, side by side,
# in turned-round order from round to round; "with / without" is the
# median of the two runs' ratio.
checkpoint_events="${CHECKPOINT_EVENTS:-$((events * 10))}"
checkpoint_runs="${CHECKPOINT_RUNS:-3}"
checkpoint_rows=()
# The median of figures a run without a completed checkpoint leaves empty.
or_dash() { local m; m=$(median "$@"); echo "${m:-–}"; }
# checkpoint_row WORKLOAD BACKEND CONFIG: measures it and adds its row.
checkpoint_row() {
    local workload=$1 backend=$2 config=$3 round interval rate off on
    local offs=() ons=() ratios=() counts=() means=() maxes=() sizes=() written=() rss=()
    local weir=(bin/weir bench "$workload" --events "$checkpoint_events" --backend "$backend" $config)
    for round in $(seq "$checkpoint_runs"); do
        local intervals=(0 1000)
        ((round % 2 == 0)) && intervals=(1000 0)
        for interval in "${intervals[@]}"; do
            rate=$(WEIR_LOG=warn "${weir[@]}" --checkpoint-interval-ms "$interval" | rate)
            weir_steal+=("$(field steal_pct)")
            if ((interval == 0)); then
                off=$rate
                continue
            fi
            on=$rate
            counts+=("$(field checkpoints)") means+=("$(field checkpoint_ms_mean)") maxes+=("$(field checkpoint_ms_max)")
            sizes+=("$(field checkpoint_mib_mean)") written+=("$(field checkpoint_written_mib_mean)") rss+=("$(field peak_rss_mib)")
        done
        offs+=("$off") ons+=("$on") ratios+=("$(ratio "$on" "$off")")
    done
    local label=${config/--parallelism /}
    label=${label/ --max-drift-ms 1000/, aligned}
    checkpoint_rows+=("| $workload | $label | $backend | $(median "${offs[@]}") | $(median "${ons[@]}") | $(median "${ratios[@]}") | $(median "${counts[@]}") | $(or_dash "${means[@]}") ($(or_dash "${maxes[@]}")) | $(or_dash "${sizes[@]}") ($(or_dash "${written[@]}")) | $(median "${rss[@]}") |")
}
for backend in ${BACKENDS:-memory rocksdb}; do
    echo "== Weir with and without checkpoints: $backend, N = $checkpoint_events, $checkpoint_runs rounds" >&2
    checkpoint_row count "$backend" "$P1"
    checkpoint_row count "$backend" "$P2"
    checkpoint_row window "$backend" "$P1"
    # (Unaligned, the second source would run 10 × N / 20 ms ahead and its
    # windows fill state for the whole run.)
    checkpoint_row window "$backend" "$ALIGNED"
done

{
    echo "# Benchmarks"
    echo
    echo "Generated by \`scripts/bench-vs-flink.sh $events\` on $(date -u +%Y-%m-%d), on $(nproc) cores"
    echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB)."
    echo "Events per second, N = $events, back to back: Flink one run, Weir the median of $runs rounds (figures"
    echo "on these machines swing by up to ±50 % from run to run). A round runs P = 1 and P = 2 (and for the"
    echo "window P = 2 aligned), each Wasm and native side by side, the order turned round from round to"
    echo "round; native / Wasm is the median over the rounds of the two runs' ratio. Both take a checkpoint every"
    echo "second (Weir: \`weir bench\`'s default \`--checkpoint-interval-ms 1000\`, into a temporary directory)."
    echo
    echo "| workload | P | backend | Flink | Weir (Wasm) | Weir (native) | Wasm / Flink | native / Wasm |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Stolen by the hypervisor (the cores of this virtual machine run other tenants' work too; /proc/stat's"
    echo "steal over the cores' time during each run): Flink's runs $(spread "${flink_steal[@]}") % (median $(median "${flink_steal[@]}")),"
    echo "Weir's $(spread "${weir_steal[@]}") % (median $(median "${weir_steal[@]}")). The more a run loses, the slower it runs (in one"
    echo "series of the count, 0.6× from 13 % to 40 %): figures compare only between runs that lost alike."
    echo
    echo "P = 2 / P = 1: Flink's two runs (back to back); Weir's the median over the rounds of the Wasm run at"
    echo "P = 2 over the Wasm run at P = 1 of the same round (seconds apart). \"aligned\": the window at P = 2"
    echo "with watermark alignment (\`--max-drift-ms 1000\`; the Flink harness has no such setting)."
    echo "\"Cores busy\": the Wasm runs' processor time (the whole process) over their wall time, P = 1 / P = 2."
    echo "\"Bound\": the most P = 2 / P = 1 could be on these $cores cores with the processor time P = 2 took, if it"
    echo "kept every core busy (P = 1's seconds over P = 2's processor seconds / $cores), medians over the rounds."
    echo
    echo "| workload | backend | Flink | Weir (Wasm) | Weir (Wasm), aligned | Weir cores busy | Weir bound |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${scaling_rows[@]}"
    echo
    echo "The window at P = 2 with watermark alignment: events per second, medians as above; \"/ unaligned\""
    echo "divides the Wasm median by that of the window's P = 2 row above (same backend)."
    echo
    echo "| backend | Weir (Wasm) | Weir (native) | native / Wasm | / unaligned |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${aligned_rows[@]}"
    echo
    echo "Weir (Wasm) with and without a checkpoint every second, N = $checkpoint_events (the runs above take about"
    echo "a second, too short for more than one checkpoint): events per second, medians of $checkpoint_runs rounds, each"
    echo "running both side by side; \"with / without\" is the median of their ratio. The checkpoints' figures are"
    echo "the runs' own (\`weir bench\`'s RESULT line): how many completed, their mean duration from trigger to"
    echo "completion (the longest), their mean size and how much of it each wrote (an incremental checkpoint"
    echo "writes only what changed), and the peak resident memory of the runs with checkpoints."
    echo
    echo "| workload | P | backend | no checkpoints | every 1 s | with / without | checkpoints | duration ms, mean (max) | MiB, size (written) | peak RSS MiB |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${checkpoint_rows[@]}"
} > docs/benchmarks.md.new
if [[ -f docs/benchmarks.md ]] && grep -q '^## ' docs/benchmarks.md; then
    # Keep the hand-written notes (from the first `## ` heading on).
    { echo; sed -n '/^## /,$p' docs/benchmarks.md; } >> docs/benchmarks.md.new
fi
mv docs/benchmarks.md.new docs/benchmarks.md
cat docs/benchmarks.md
