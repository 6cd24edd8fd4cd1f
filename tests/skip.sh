# shellcheck shell=bash
# Sourced by the shell tests: `skip REASON` exits 77 (meson's skip) where a prerequisite is
# missing, or 1 under CI=true, where a missing prerequisite is a failure.
skip() {
  echo "skipped: $1"
  [[ ${CI:-} == true ]] && { echo "FAILED: CI=true, so a missing prerequisite is a failure"; exit 1; }
  exit 77
}
