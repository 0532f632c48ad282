#!/usr/bin/env bash
# The main demo, from a fresh machine: set up, then run the word-count job on
# the bundled text and show the ten most frequent words.
#
#   scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

printf '\033[1m==> weir run examples/word-count.toml\033[0m\n' >&2
bin/weir run examples/word-count.toml | tee /tmp/weir-word-count.out | tail -n 5
echo "... (every update is printed; the last one per word is its total)"
echo
echo "Top 10 words:"
# The last update per word is its count.
awk -F '\t' '{ count[$1] = $2 } END { for (w in count) print count[w] "\t" w }' /tmp/weir-word-count.out \
    | sort -rn | head -n 10
