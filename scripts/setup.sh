#!/usr/bin/env bash
# Installs the Debian packages Troupe needs to build and test (libjs-chart.js among them: the build
# embeds its Chart.js in troupe-report's pages; openmpi-bin: a test launches a job with mpirun);
# with --bench also PyTorch (Debian's python3-torch, with Pillow) and OpenMPI's headers, which the
# side-by-side benchmarks and the golden-data generator use;
# with --browser also Chromium, which the troupe-serve and troupe-report page tests drive headless
# (they skip without it; scripts/test.sh passes --browser, so the suite runs them).
# Idempotent and quiet: does nothing when everything is present. Runs as root, or through sudo.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libucx-dev libboost-dev
  libopenblas-dev libdnnl-dev ocl-icd-opencl-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libpng-dev zlib1g-dev libcli11-dev libicu-dev
  libjs-chart.js
  python3 openmpi-bin
)
for option in "$@"; do
  case "$option" in
    --bench) packages+=(python3-torch python3-pil libopenmpi-dev) ;;
    --browser) packages+=(chromium) ;;
    *) echo "setup.sh: unknown option '$option'; use --bench and/or --browser" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
