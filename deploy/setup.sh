#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and benchmarking ringattn
# need (idempotent, as root), then builds the release tree in ./build.
#
#   deploy/setup.sh            packages + release build
#   deploy/setup.sh --no-build packages only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  # build (the daemon: TOML configuration, sd_notify)
  build-essential g++ pkg-config meson ninja-build
  libasio-dev libdnnl-dev libspdlog-dev doctest-dev libomp-dev libssl-dev
  libtomlplusplus-dev libsystemd-dev
  # tests: sanitizers and libFuzzer (clang), aarch64 NEON under qemu, netns testbed
  clang libclang-rt-14-dev libfuzzer-14-dev
  g++-aarch64-linux-gnu qemu-user
  iproute2 procps
  # the Python module (built for Debian's python3) and its tests; mpirun for the embedding test
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest openmpi-bin
  # benchmarks: iperf3 baseline, peak RSS
  iperf3 time
  # deploy/ tests: systemd-analyze (systemd), a single-node Slurm cluster, the manifests'
  # schema check (the Kubernetes API's Python models)
  systemd slurmd slurmctld slurm-client munge python3-yaml python3-kubernetes
)
# kubectl (deploy/k8s/test_k8s.sh makes the Secret with it): Debian's, unless one is installed
# already (another kubectl package conflicts with kubernetes-client)
command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # iperf3 asks whether to start a daemon; the answer is no.
  echo "iperf3 iperf3/start_daemon boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ "${1:-}" == "--no-build" ]] && exit 0

if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=release -Dwerror=true >/dev/null
fi
echo "setup: building (ninja -C build)"
ninja -C build | tail -n 1
