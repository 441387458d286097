#!/usr/bin/env bash
# Sets up the machine, builds Troupe and runs the main job: a short troupe-gpt training of gpt-mini
# on the actor runtime (900 steps, about 1.5 minutes on 2 cores: a warm-up, then a cosine decay of
# the learning rate; the loss falls from ~5.6 to ~1.3), a report of the run (HTML, with its loss
# curves), and a sample generated from the checkpoint it saved. Extra arguments go to the training
# (e.g. --trace out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build=${BUILD_DIR:-build}
run_dir="$build/demo-gpt"
rm -rf "$run_dir" "$run_dir.log"
"$build"/apps/troupe-gpt --steps 900 --eval-every 300 --log-every 50 --lr 1e-3 --lr-schedule cosine --warmup-steps 50 \
  --min-lr 1e-4 --save "$run_dir" --report "$run_dir/report.html" "$@" | tee "$run_dir.log"
echo
echo "--- sample from $run_dir (troupe-gpt generate --temperature 0.6 --top-k 10) ---"
"$build"/apps/troupe-gpt generate --checkpoint "$run_dir" --prompt "The " --tokens 300 --temperature 0.6 --top-k 10
echo
val_loss=$(grep -o '"val_loss":[0-9.]*' "$run_dir.log" | tail -n 1 | cut -d: -f2)
echo "--- validation loss ${val_loss:-?} nats per byte; charts of the run: $run_dir/report.html ---"
