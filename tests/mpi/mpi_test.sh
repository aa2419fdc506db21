#!/usr/bin/env bash
# Distributed TP tests (ctest runs each case; registered only when the MPI
# backend is built). Usage: mpi_test.sh CASE
#   fixtures  MPI TP=2 == threads TP=2 == TP=1 on the W4A16 fixtures (ids and logits bits;
#             and `wna16 logits` output); MPI EP=2 and TP=2 x EP=2 == threads likewise
#   demo      the same through `wna16 generate --json` on the demo model; bench
#             model and bench comm under MPI report the all-reduce
#   kill      SIGKILL one rank mid-generation: the job exits non-zero within 30 s
#   hang      SIGSTOP one rank: the other's watchdog exits non-zero within 30 s
#   refuse    a checkpoint refused at TP=4: all 4 ranks print the same error, exit 1;
#             and --tp (or --ep x --tp) differing from -np: every rank refuses
# Environment: WNA16_CLI (the wna16 binary), WNA16_MPI_EQUAL (mpi_tp_equal),
# WNA16_SOURCE_DIR, MPIEXEC (mpirun/mpiexec).
set -uo pipefail
case_name=${1:?case}
cli=${WNA16_CLI:?}
src=${WNA16_SOURCE_DIR:?}
mpiexec=${MPIEXEC:-mpirun}
# Open MPI refuses root and more ranks than cores unless told (CI runs as root
# on 2 cores); MPICH needs neither flag.
flags=()
if "$mpiexec" --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  flags=(--allow-run-as-root --oversubscribe)
  export OMPI_MCA_rmaps_base_oversubscribe=1
fi
# Open MPI keeps allocations until exit by design: not ours to report.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }
run_mpi() { local np=$1; shift; "$mpiexec" "${flags[@]}" -np "$np" "$@"; }

demo_model() {
  "$cli" synth --out "$tmp/demo" --preset demo > /dev/null || fail "synth demo"
  cp "$src"/tests/data/tokenizer/qwen3/tokenizer*.json "$tmp/demo/" || fail "tokenizer copy"
}

tokens() { grep -o '"tokens": \[[^]]*\]' "$1"; }

# pid of the rank-$2 process of the job tagged $1 (any launcher: scan environments)
rank_pid() {
  local tag=$1 want=$2 f env
  for f in /proc/[0-9]*/environ; do
    env=$({ tr '\0' '\n' < "$f"; } 2>/dev/null) || continue
    grep -qx "WNA16_TEST_TAG=$tag" <<<"$env" || continue
    grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=$want" <<<"$env" || continue
    { tr '\0' '\n' < "${f%environ}cmdline"; } 2>/dev/null | grep -qx generate || continue
    echo "${f//[^0-9]/}"
    return 0
  done
  return 1
}

# Starts a long generation, waits for streamed output, applies signal $1 to
# rank 1, then requires the job to end non-zero within 30 s.
interrupt() {
  local sig=$1
  local tag="wna16-$$-$sig"
  demo_model
  WNA16_TEST_TAG=$tag WNA16_MPI_TIMEOUT=${WNA16_MPI_TIMEOUT:-20} \
    run_mpi 2 "$cli" generate --model "$tmp/demo" --tp 2 --prompt "Once upon a time" -n 3500 \
    --ctx 4096 > "$tmp/out" 2> "$tmp/err" &
  local job=$!
  pids+=("$job")
  for _ in $(seq 200); do [ -s "$tmp/out" ] && break; sleep 0.1; done
  [ -s "$tmp/out" ] || { cat "$tmp/err" >&2; fail "no tokens streamed within 20 s"; }
  local victim
  victim=$(rank_pid "$tag" 1) || fail "cannot find rank 1"
  pids+=("$victim")
  local t0=$SECONDS
  kill "-$sig" "$victim" || fail "kill -$sig $victim"
  while kill -0 "$job" 2>/dev/null && [ $((SECONDS - t0)) -lt 30 ]; do sleep 0.2; done
  kill -0 "$job" 2>/dev/null && { cat "$tmp/err" >&2; fail "job still running 30 s after SIG$sig of rank 1"; }
  wait "$job"
  local rc=$?
  echo "SIG$sig of rank 1 (pid $victim): job exited with status $rc after $((SECONDS - t0)) s"
  sed 's/^/  stderr: /' "$tmp/err" | head -8
  [ "$rc" -ne 0 ] || fail "job exited 0 after rank 1 was killed"
}

case "$case_name" in
fixtures)
  run_mpi 2 "${WNA16_MPI_EQUAL:?}" "$src/tests/data/models/qwen3_moe_tp" \
    "$src/tests/data/models/qwen3_w4a16" "$src/tests/data/models/llama_w4a16" || fail "MPI TP=2 differs (or failed)"
  # expert parallelism: EP=2 on 2 ranks, and TP=2 x EP=2 on 4 (groups split from the world)
  run_mpi 2 "${WNA16_MPI_EQUAL:?}" "ep=2:$src/tests/data/models/deepseek_v3_w4a16" \
    "ep=2:$src/tests/data/models/deepseek_v2_w4a16" "ep=2:$src/tests/data/models/qwen2_moe_w4a16" ||
    fail "MPI EP=2 differs from threads EP=2 (or failed)"
  run_mpi 4 "${WNA16_MPI_EQUAL:?}" "ep=2:$src/tests/data/models/deepseek_v3_w4a16" ||
    fail "MPI TP=2 x EP=2 differs from threads (or failed)"
  # the CLI's logits: every value printed, MPI == threads, text-identical
  for m in qwen3_moe_tp qwen3_w4a16 llama_w4a16 deepseek_v3_w4a16 deepseek_v2_w4a16; do
    "$cli" logits --model "$src/tests/data/models/$m" --ids 1,2,3,4,5 --tp 2 > "$tmp/thr" || fail "$m: threads logits"
    run_mpi 2 "$cli" logits --model "$src/tests/data/models/$m" --ids 1,2,3,4,5 > "$tmp/mpi" || fail "$m: MPI logits"
    [ -s "$tmp/thr" ] && cmp -s "$tmp/thr" "$tmp/mpi" || fail "$m: wna16 logits under MPI differs from threads TP=2"
    echo "$m: wna16 logits: MPI TP=2 == threads TP=2 ($(wc -l < "$tmp/mpi") values)"
  done
  for m in deepseek_v3_w4a16 qwen2_moe_w4a16; do
    "$cli" logits --model "$src/tests/data/models/$m" --ids 1,2,3,4,5 --ep 2 > "$tmp/thr" || fail "$m: threads EP logits"
    run_mpi 2 "$cli" logits --model "$src/tests/data/models/$m" --ids 1,2,3,4,5 --ep 2 > "$tmp/mpi" || fail "$m: MPI EP logits"
    [ -s "$tmp/thr" ] && cmp -s "$tmp/thr" "$tmp/mpi" || fail "$m: wna16 logits --ep 2 under MPI differs from threads"
    echo "$m: wna16 logits --ep 2: MPI == threads ($(wc -l < "$tmp/mpi") values)"
  done
  ;;
demo)
  demo_model
  args=(generate --model "$tmp/demo" --prompt "The capital of France is" -n 8 --json)
  "$cli" "${args[@]}" --tp 1 > "$tmp/tp1" || fail "TP=1 run"
  "$cli" "${args[@]}" --tp 2 > "$tmp/thr" || fail "threads TP=2 run"
  run_mpi 2 "$cli" "${args[@]}" --tp 2 > "$tmp/mpi" 2> "$tmp/mpi.err" || { cat "$tmp/mpi.err"; fail "MPI TP=2 run"; }
  cat "$tmp/mpi"
  [ "$(wc -l < "$tmp/mpi")" -eq 1 ] || fail "rank 0 only must print (got $(wc -l < "$tmp/mpi") lines)"
  grep -q '"backend": "mpi"' "$tmp/mpi" || fail "not an MPI run"
  grep -q '"rank_peak_rss_mib": \[[0-9.]*, [0-9.]*\]' "$tmp/mpi" || fail "no per-rank memory"
  t1=$(tokens "$tmp/tp1"); t2=$(tokens "$tmp/thr"); t3=$(tokens "$tmp/mpi")
  echo "TP=1 $t1"; echo "threads TP=2 $t2"; echo "MPI TP=2 $t3"
  [ -n "$t1" ] && [ "$t1" = "$t2" ] && [ "$t2" = "$t3" ] || fail "greedy tokens differ"
  # the all-reduce share of decode, measured under MPI, and the all-reduce alone
  run_mpi 2 "$cli" bench model --model "$tmp/demo" --prompt 16 --decode 4 --json > "$tmp/bench" ||
    fail "bench model under MPI"
  cat "$tmp/bench"
  grep -q '"comm_backend": "mpi".*"allreduce_decode_share": [0-9.]*' "$tmp/bench" || fail "no all-reduce share"
  run_mpi 2 "$cli" bench comm --iters 50 --json > "$tmp/comm" || fail "bench comm under MPI"
  cat "$tmp/comm"
  grep -q '"backend": "mpi", "tp": 2' "$tmp/comm" || fail "bench comm: not MPI"
  ;;
kill) interrupt KILL ;;
hang)
  WNA16_MPI_TIMEOUT=3 interrupt STOP
  grep -q "rank 0 of 2: MPI .* did not complete within 3 s: rank 1 died or hangs" "$tmp/err" ||
    fail "rank 0's watchdog did not report"
  ;;
refuse)
  # every rank reports its own exit status through a wrapper (and Open MPI
  # must not kill the job when the first rank exits non-zero)
  export OMPI_MCA_orte_abort_on_non_zero_status=0
  wrap='"$0" "$@"; rc=$?; echo "exit=$rc" >&2; exit $rc'
  run_mpi 4 sh -c "$wrap" "$cli" generate --model "$src/tests/data/ct/qwen3_moe_w4a16_g32" --tp 4 \
    --tokenizer "$src/tests/data/tokenizer/qwen3" --prompt hi > "$tmp/out" 2> "$tmp/err"
  rc=$?
  cat "$tmp/err"
  echo "mpirun: status $rc (Open MPI reports 0 when told not to abort; each rank's status is above)"
  [ ! -s "$tmp/out" ] || fail "something was printed on stdout"
  [ "$(grep -c '^exit=1$' "$tmp/err")" -eq 4 ] || fail "not every rank exited 1"
  errs=$(grep '^wna16 generate: ' "$tmp/err")
  [ "$(wc -l <<<"$errs")" -eq 4 ] || fail "expected 4 error lines"
  [ "$(sort -u <<<"$errs" | wc -l)" -eq 1 ] || fail "the ranks' errors differ"
  grep -q "ERR_TP_INDIVISIBLE: rank 0: " <<<"$errs" || fail "not the TP refusal"
  # --tp must match the number of processes
  run_mpi 2 sh -c "$wrap" "$cli" generate --model "$src/tests/data/models/qwen3_moe_tp" --tp 3 \
    --prompt hi > "$tmp/out" 2> "$tmp/err"
  cat "$tmp/err"
  [ "$(grep -c '^exit=2$' "$tmp/err")" -eq 2 ] || fail "--tp 3 under -np 2: not every rank exited 2"
  [ "$(grep -c 'the MPI launcher started 2 processes' "$tmp/err")" -eq 2 ] || fail "--tp mismatch message"
  # --ep x --tp must be the number of processes
  run_mpi 2 sh -c "$wrap" "$cli" logits --model "$src/tests/data/models/deepseek_v3_w4a16" --ids 1,2 \
    --ep 2 --tp 2 > "$tmp/out" 2> "$tmp/err"
  cat "$tmp/err"
  [ "$(grep -c '^exit=1$' "$tmp/err")" -eq 2 ] || fail "--ep 2 --tp 2 under -np 2: not every rank exited 1"
  [ "$(grep -c -- '--ep 2 x --tp 2 is 4 ranks, but 2 were started; start 4 ranks' "$tmp/err")" -eq 2 ] ||
    fail "--ep x --tp mismatch message"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
