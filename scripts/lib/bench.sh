# Sourced by the scripts that compare Weir with Flink: reading their
# `RESULT … events_per_s=N …` lines and dividing the figures.

# events_per_s < TEXT: the events/s of the last RESULT line in TEXT.
events_per_s() { sed -n 's/.*events_per_s=\([0-9]*\).*/\1/p' | tail -n 1; }

# ratio A B: A / B to two places, `n/a` without a B.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
