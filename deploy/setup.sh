#!/usr/bin/env bash
# Installs the Debian 12 packages ringattn needs (idempotent, as root), then builds the
# release tree in ./build.
#
#   deploy/setup.sh            every package (build, tests, benchmarks, deploy checks) and
#                              the whole release build, tests included (what deploy/test.sh runs)
#   deploy/setup.sh --demo     only the build packages, and only the program and the library
#                              (what deploy/demo.sh runs: about 1 minute of packages and 1.5
#                              of building on the 2-core test VM, against 3 and 4 for the whole)
#   deploy/setup.sh --no-build every package, no build
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
case "${1:-}" in
  "") ;;
  --demo) mode=demo ;;
  --no-build) mode=packages ;;
  *) echo "setup: unknown option '$1' (expected --demo or --no-build)" >&2; exit 2 ;;
esac

# What building the library and the program needs (the daemon: TOML configuration, sd_notify,
# the OpenAI-style endpoint's HTTP server cpp-httplib; the programs' JSON: nlohmann-json3-dev).
BUILD_PACKAGES=(
  build-essential g++ pkg-config meson ninja-build
  libasio-dev libdnnl-dev libspdlog-dev doctest-dev libomp-dev libssl-dev
  libtomlplusplus-dev libsystemd-dev nlohmann-json3-dev libcpp-httplib-dev
)
# What the tests, benchmarks and deploy checks need besides.
TEST_PACKAGES=(
  # sanitizers and libFuzzer (clang), aarch64 NEON under qemu, netns testbed
  clang libclang-rt-14-dev libfuzzer-14-dev
  g++-aarch64-linux-gnu qemu-user
  iproute2 procps
  # the Python module (built for Debian's python3) and its tests; mpirun for the embedding test
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest openmpi-bin
  # the PyTorch autograd function (ringattn.torch) and its tests against torch autograd
  python3-torch
  # the chat templates' oracle (tests/model/chat_templates/oracle.py)
  python3-jinja2
  # the daemons' page, driven headless (tests/serve/test_page.py)
  chromium
  # benchmarks: iperf3 baseline, peak RSS
  iperf3 time
  # deploy/ tests: systemd-analyze (systemd), a single-node Slurm cluster, the manifests'
  # schema check (the Kubernetes API's Python models)
  systemd slurmd slurmctld slurm-client munge python3-yaml python3-kubernetes
)
PACKAGES=("${BUILD_PACKAGES[@]}")
if [[ $mode != demo ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
  # kubectl (deploy/k8s/test_k8s.sh makes the Secret with it): Debian's, unless one is installed
  # already (another kubectl package conflicts with kubernetes-client)
  command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)
  command -v npm >/dev/null || PACKAGES+=(nodejs npm)  # the openai Node client test (a NodeSource nodejs has npm and conflicts with Debian's)
fi

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

[[ $mode == packages ]] && exit 0

# A tree configured for the demo found no pybind11 (the Python module is an auto feature):
# configured again once every package is here, so that the tests get the module.
if [[ $mode == all && -f build/build.ninja && "$(cat build/.setup-mode 2>/dev/null)" == demo ]]; then
  meson setup --reconfigure build >/dev/null
fi
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=release -Dwerror=true >/dev/null
fi
if [[ $mode == demo ]]; then
  [[ "$(cat build/.setup-mode 2>/dev/null)" == all ]] || echo demo >build/.setup-mode
  echo "setup: building the program and the library (ninja -C build ringattn)"
  ninja -C build ringattn | tail -n 1
else
  echo all >build/.setup-mode
  echo "setup: building (ninja -C build)"
  ninja -C build | tail -n 1
fi
