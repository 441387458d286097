#!/usr/bin/env bash
# The GPU check in two halves, for a GPU machine that has the CUDA driver and CUDA 13's libraries
# but neither Troupe's build dependencies nor a network:
#   scripts/gpu_check.sh pack [BUILD] [PACK]   here: builds BUILD (default build/, configured with
#       the CUDA backend) and packs its GPU test binaries, Troupe's libraries and the libraries they
#       need that such a machine lacks (CAF, UCX, oneDNN, OpenBLAS, the C++ runtime; not CUDA's)
#       into PACK (default gpu-pack/gpu_check.tar.xz, about 20 MB)
#   scripts/gpu_check.sh run [PACK] [LOGS]      there: unpacks PACK, finds CUDA's libraries (the
#       toolkit's, or those of Python's nvidia-* packages), names the GPU, runs every GPU test with
#       TROUPE_REQUIRE_GPU=1 (a skipped GPU test fails), prints a summary line per binary and a
#       last line "gpu_check: N passed, M failed" (exit 1 on any failure); LOGS keeps each log
# Both halves together take a few minutes; `run` alone well under ten.
set -euo pipefail
cd "$(dirname "$0")/.."

# The GPU test binaries: every suite whose tests need a device.
gpu_tests() { for t in test_cuda test_cuda_parity test_nccl; do [[ -x "$1/tests/$t" ]] && echo "$1/tests/$t"; done; }

pack() {
  local build=${1:-build} pack=${2:-gpu-pack/gpu_check.tar.xz}
  cmake -S . -B "$build" -DTROUPE_CUDA=ON >/dev/null
  cmake --build "$build" -j"$(nproc)" --target test_cuda test_cuda_parity $(grep -q troupe_transport_nccl "$build/Makefile" 2>/dev/null && echo test_nccl)
  ldd "$build/kernels/libtroupe_kernels.so" | grep -q libcudart ||
    { echo "gpu_check: $build has no CUDA backend (no CUDA toolkit found); install it under /usr/local/cuda" >&2; exit 1; }
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/bin" "$stage/lib"
  local bins
  bins=$(gpu_tests "$build")
  [[ -n $bins ]] || { echo "gpu_check: $build has no GPU test binaries" >&2; exit 1; }
  cp $bins "$stage/bin/"
  # Every library the binaries load but the driver's, CUDA's own and glibc's (the GPU machine has those).
  ldd $bins | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvidia*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  mkdir -p "$(dirname "$pack")"
  tar -C "$stage" -cJf "$pack" bin lib
  echo "gpu_check: packed $(echo "$bins" | wc -w) GPU test binaries and $(ls "$stage/lib" | wc -l) libraries into $pack ($(du -h "$pack" | cut -f1))"
}

# Folders holding CUDA 13's runtime libraries on this machine, for LD_LIBRARY_PATH.
cuda_library_path() {
  local dirs=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -e $d/libcudart.so.13 ]] && dirs+=("$d"); done
  if command -v python3 >/dev/null; then
    # Python's nvidia-* wheels (nvidia-cuda-runtime, nvidia-cublas, nvidia-nccl-cu13, ...).
    while read -r d; do dirs+=("$d"); done < <(python3 - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for lib in sorted(set(os.path.dirname(p) for p in glob.glob(os.path.join(root, "nvidia", "**", "lib*.so*"), recursive=True))):
        print(lib)
EOF
)
  fi
  local IFS=:
  echo "${dirs[*]}"
}

run() {
  local pack=${1:-gpu-pack/gpu_check.tar.xz} logs=${2:-}
  [[ -f $pack ]] || { echo "gpu_check: no pack at $pack; make it with 'scripts/gpu_check.sh pack' where Troupe builds" >&2; exit 1; }
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ||
    echo "gpu_check: no nvidia-smi on this machine"
  local dir
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$pack"
  export LD_LIBRARY_PATH="$dir/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TROUPE_REQUIRE_GPU=1
  local passed=0 failed=0
  for bin in "$dir"/bin/*; do
    local name log
    name=$(basename "$bin")
    log=$dir/$name.log
    if "$bin" >"$log" 2>&1; then status=passed; else status=FAILED; fi
    echo "gpu_check: $name $status: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]+ tests?' "$log" | tr '\n' ' ')"
    grep -oE '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+' "$log" | sort -u || true
    [[ $status == passed ]] && passed=$((passed + 1)) || failed=$((failed + 1))
    [[ -n $logs ]] && mkdir -p "$logs" && cp "$log" "$logs/"
  done
  echo "gpu_check: $passed passed, $failed failed"
  ((failed == 0))
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu_check.sh pack [BUILD] [PACK] | run [PACK] [LOGS]" >&2; exit 2 ;;
esac
