#!/usr/bin/env bash
# The README's main job: installs what it needs, builds, then runs a 4-node ring on
# loopback (4 processes, causal mask, zigzag layout) on generated inputs and checks the
# result against dense float64 attention, printing the error and the GFLOP/s.
# Extra arguments go to `ringattn verify` (see `build/ringattn verify --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh --demo
exec build/ringattn verify --nodes 4 --seq 2048 --heads 8 --kv-heads 2 --head-dim 128 \
  --layout zigzag --causal --quiet "$@"
