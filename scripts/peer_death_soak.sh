#!/usr/bin/env bash
# Soak test of the no-hang promise: starts two ranks of troupe-gpt --dp 2 by hand (the environment
# mpirun or Slurm would set, no troupe-launch), kills or stops one of them at a random moment, and
# checks that the survivor exits non-zero naming that rank within TROUPE_TIMEOUT plus BOUND_MS.
# Prints one line per failure and a JSON summary (runs, hangs, wrong exits, worst detection time).
#   scripts/peer_death_soak.sh [RUNS=400] [SEED=1]
# Environment: BUILD_DIR (default build), TIMEOUT_S (default 1), BOUND_MS (default 1000),
# SIGNALS (default "KILL STOP"), MAX_MOMENT_MS (default 2000).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-400}
RANDOM=${2:-1}
bin=${BUILD_DIR:-build}/apps/troupe-gpt
timeout_s=${TIMEOUT_S:-1}
bound_ms=${BOUND_MS:-1000}
read -r -a signals <<<"${SIGNALS:-KILL STOP}"
max_moment_ms=${MAX_MOMENT_MS:-2000}
[ -x "$bin" ] || { echo "peer_death_soak.sh: $bin not found; run scripts/build.sh first" >&2; exit 2; }

work=$(mktemp -d)
trap 'pkill -KILL -P $$ 2>/dev/null; rm -rf "$work"' EXIT
python3 -c 'import random; random.seed(7); print("".join(random.choice("the quick brown fox jumps over a lazy dog.\n ") for _ in range(20000)))' >"$work/corpus.txt"
limit_ms=$(python3 -c "print(int($timeout_s * 1000 + $bound_ms))")
now_ms() { date +%s%3N; }

hangs=0 wrong=0 worst=0 total=0
for ((k = 0; k < runs; ++k)); do
  victim=$((RANDOM % 2))
  sig=${signals[$((RANDOM % ${#signals[@]}))]}
  moment_ms=$((RANDOM % (max_moment_ms + 1)))
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for r in 0 1; do
    TROUPE_RANK=$r TROUPE_WORLD_SIZE=2 TROUPE_MASTER_ADDR=127.0.0.1 TROUPE_MASTER_PORT=$port TROUPE_JOB_TOKEN=soak \
      TROUPE_TIMEOUT=$timeout_s "$bin" --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --batch 4 --threads 1 \
      --steps 1000000 --eval-every 0 --val-batches 1 --dp 2 --data "$work/corpus.txt" >"$work/rank$r.log" 2>&1 &
    pid[$r]=$!
  done
  sleep "$(printf '%d.%03d' $((moment_ms / 1000)) $((moment_ms % 1000)))"
  kill -s "$sig" "${pid[$victim]}"
  survivor=$((1 - victim))
  t0=$(now_ms)
  while kill -0 "${pid[$survivor]}" 2>/dev/null && [ $(($(now_ms) - t0)) -le "$limit_ms" ]; do sleep 0.01; done
  took=$(($(now_ms) - t0))
  if kill -0 "${pid[$survivor]}" 2>/dev/null; then
    hangs=$((hangs + 1))
    echo "run $k: HANG: rank $survivor still running ${took} ms after SIG$sig to rank $victim at ${moment_ms} ms"
  fi
  kill -KILL "${pid[0]}" "${pid[1]}" 2>/dev/null
  wait "${pid[$survivor]}" 2>/dev/null
  rc=$?
  wait "${pid[$victim]}" 2>/dev/null
  line=$(grep -m1 -E "^troupe-gpt: .*error" "$work/rank$survivor.log")
  if [ "$rc" -eq 0 ] || [ "$rc" -gt 128 ] || ! grep -qE "rank(\(s\))? $victim\b" <<<"$line"; then
    wrong=$((wrong + 1))
    echo "run $k: rank $survivor exited $rc after SIG$sig to rank $victim at ${moment_ms} ms: ${line:-no error line}"
  fi
  [ "$took" -gt "$worst" ] && worst=$took
  total=$((total + took))
done 2>/dev/null  # bash's "Killed" notices for the ranks it reaps
printf '{"bench":"peer_death_soak","runs":%d,"hangs":%d,"wrong_exits":%d,"timeout_ms":%d,"worst_detection_ms":%d,"mean_detection_ms":%d,"signals":"%s","cpu":"%s"}\n' \
  "$runs" "$hangs" "$wrong" "$(python3 -c "print(int($timeout_s*1000))")" "$worst" $((total / (runs > 0 ? runs : 1))) \
  "${signals[*]}" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
[ "$hangs" -eq 0 ] && [ "$wrong" -eq 0 ]
