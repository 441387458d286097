#!/usr/bin/env bash
# Prints the figures of the fixed-seed training runs a refactoring must leave bit-identical: per
# configuration of troupe-gpt and troupe-sr, every step's loss and gradient figures, the final
# line's losses and quality, and the SHA-256 of the saved weights and optimizer state. Run it on
# the build before a change and on the one after, and diff the two outputs:
#   scripts/behaviour_figures.sh build-old/apps > before.txt
#   scripts/behaviour_figures.sh build/apps > after.txt && diff before.txt after.txt
# APPS: the folder holding troupe-gpt, troupe-sr and troupe-launch (default build/apps).
set -euo pipefail
cd "$(dirname "$0")/.."
apps=$(realpath "${1:-build/apps}")
steps=${STEPS:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs one configuration: NAME RANKS APP [ENV=VALUE ...] -- FLAGS...
run() {
  local name=$1 ranks=$2 app=$3
  shift 3
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local dir="$work/$name"
  mkdir -p "$dir"
  local cmd=("$apps/$app" --steps "$steps" --eval-every "$steps" --seed 7 --metrics "$dir/metrics.jsonl"
             --save "$dir/ck" --log-every "$steps" "$@")
  if ((ranks > 1)); then cmd=("$apps/troupe-launch" -n "$ranks" -- "${cmd[@]}"); fi
  if ! env "${envs[@]}" "${cmd[@]}" >"$dir/out.txt" 2>&1; then
    echo "== $name: FAILED"; tail -5 "$dir/out.txt"; return
  fi
  echo "== $name"
  # Per step: loss, gradient norm and variance as printed (6 significant digits)...
  python3 - "$dir/metrics.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], r["loss"], r.get("grad_norm"), r.get("grad_variance"))
EOF
  # ... the final line's figures, and every byte of what was saved.
  grep -o '"\(train_loss\|val_loss\|val_psnr\)":[^,}]*' "$dir/out.txt" | tr '\n' ' '; echo
  (cd "$dir/ck/$(cat "$dir/ck/latest")" && sha256sum model.safetensors optimizer.safetensors)
}

gpt=troupe-gpt
small=(--batch 4 --seq 64)
run gpt-plain 1 $gpt -- "${small[@]}"
run gpt-3mb 1 $gpt -- "${small[@]}" --micro-batches 3
run gpt-noclip 1 $gpt -- "${small[@]}" --clip 0
run gpt-standard 1 $gpt GRAD_MODE=standard -- "${small[@]}"
run gpt-eager 1 $gpt JIT_LEVEL=0 -- "${small[@]}"
run gpt-dp2 2 $gpt -- "${small[@]}" --dp 2 --comm-fusion-mb 4
run gpt-dp2-standard-1mb 2 $gpt GRAD_MODE=standard -- "${small[@]}" --dp 2 --comm-fusion-mb 1
run gpt-tp2 2 $gpt -- "${small[@]}" --tp 2 --amp O0
run gpt-tp2-2mb 2 $gpt -- "${small[@]}" --tp 2 --amp O0 --micro-batches 2
run gpt-tp2-o2 2 $gpt -- "${small[@]}" --tp 2 --amp O2
run gpt-dp2-tp2-zero1 4 $gpt -- "${small[@]}" --dp 2 --tp 2 --zero 1 --amp O0 --comm-fusion-mb 1
run gpt-dp2-zero1 2 $gpt -- "${small[@]}" --dp 2 --zero 1 --comm-fusion-mb 1
# (the searched mesh is chosen from the speeds measured at start: a busy machine can choose another
# mesh, whose sums differ in the last bits while the printed figures agree; run it again then)
run gpt-searched-4 4 $gpt -- --batch 8 --seq 64 --amp O0 --comm-fusion-mb 1
run sr-plain 1 troupe-sr -- --patch 32
run sr-uneven 1 troupe-sr -- --patch 32 --batch 3 --micro-batches 2
run sr-clip 1 troupe-sr -- --patch 32 --clip 1.0
