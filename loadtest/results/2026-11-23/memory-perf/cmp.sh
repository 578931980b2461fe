#!/usr/bin/env bash
# Alternates a release `weft` of the previous main (before, copied to /tmp/mp/weft-before) and
# this branch's (after) on each mix; summaries appended to /tmp/mp/cmp.log.
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." || exit 1
AFTER=$PWD/target/release/weft
for mix in "get 0 0" "set 100 0" "mix 30 2"; do
  set -- $mix
  for which in before after; do
    if [[ $which == before ]]; then bin=/tmp/mp/weft-before; else bin=$AFTER; fi
    WEFT_BIN=$bin SKIP_BUILD=1 SET_PCT=$2 SEARCH_PCT=$3 DURATION=6s CONCURRENCY="16 64" \
      RESULTS=/tmp/mp/cmp-$which-$1 loadtest/memory-bench.sh > /tmp/mp/cmp-$which-$1.out 2>&1
    echo "$which $1 $(uptime | sed 's/.*load average: //')" >> /tmp/mp/cmp.log
    grep '^| [0-9]' /tmp/mp/cmp-$which-$1.out >> /tmp/mp/cmp.log
  done
done
echo done >> /tmp/mp/cmp.log
