#!/usr/bin/env bash
# The README's main job: installs what it needs, builds, and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
exec build/ringattn demo "$@"
