#!/usr/bin/env bash
# Issue 25: side_by_side.py's `train` and `audio` programs on N GPUs of one host, N = 1, 2, 4, 8 (as many as the
# machine has), one process per GPU under `torchrun --standalone --nproc_per_node=N` (benchmarks/multi_gpu.py:
# device_id, shard_id and num_shards from the rank, as DALI's multi-GPU examples), with DALI and with sluice.
# Prints a table of per-GPU rate against N (and its ratio to N=1) and appends one JSON row per (workload,
# implementation, N) to benchmarks/results/multi_gpu.jsonl (and $OUT): every rank's rate, the cores, each rank's
# share of them, its threads (peak), busy threads, child processes (peak) and the cores it used.
#   bash benchmarks/multi_gpu.sh [WORKLOAD...]     (default: train audio)
# Environment: as dali_side_by_side.sh (IMPLS "dali sluice", DALI_PATH /tmp/dali, SITE /tmp/site, DATA /tmp/sbs,
# COMMIT); NS (rank counts; default 1 2 4 8 up to the GPUs seen); IMAGES, CLIPS (8192, 1024: the data set made in
# $DATA, shared by the ranks, each reading 1/N of it, so that at N=8 an epoch of `train` is 4 batches per rank:
# both implementations pay the epoch ends); PYTHON (python3); CPU=1: the harness's dry run on
# CPU ranks (NS 1 2, small batches, device='cpu'; rows carry cpu_dry_run=true, go to $OUT only, and are not figures).
# DALI's environment and sluice's stay apart: DALI runs with only DALI_PATH on its path, sluice without it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); top=$(dirname "$here")
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$here/results"
IMPLS=${IMPLS:-dali sluice}; DALI_PATH=${DALI_PATH:-/tmp/dali}; SITE=${SITE:-/tmp/site}; DATA=${DATA:-/tmp/sbs}
PYTHON=${PYTHON:-python3}; CPU=${CPU:-0}
works=${*:-train audio}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
gen="$here/peers/gen.py"
if [ "$CPU" = 1 ]; then
  gpus=0; NS=${NS:-1 2}; flag=--cpu; images=${IMAGES:-64}; clips=${CLIPS:-16}; seconds=1
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$gpus" -ge 1 ] || { echo "multi_gpu.sh: no GPU seen (nvidia-smi -L); CPU=1 runs the harness's dry run"; exit 1; }
  NS=${NS:-$(for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && echo -n "$n "; done)}
  flag=; images=${IMAGES:-8192}; clips=${CLIPS:-1024}; seconds=10
fi
[ -d "$DATA/images" ] || { echo "making $images JPEGs"; PYTHONPATH=$SITE $PYTHON "$gen" images "$DATA/images" $images; }
[ -d "$DATA/wav" ] || { echo "making $clips WAVs"; PYTHONPATH=$SITE $PYTHON "$gen" audio "$DATA/wav" $clips $seconds; }
commit=${COMMIT:-$(cd "$top" && git rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); device=${device:-CPU}
runs="$OUT/multi_gpu_runs"; rm -rf "$runs"; mkdir -p "$runs"
for w in $works; do
  case $w in audio*) d="$DATA/wav";; *) d="$DATA/images";; esac
  for n in $NS; do
    for impl in $IMPLS; do
      if [ "$impl" = dali ]; then path=$DALI_PATH; else path=$SITE:$top/src; fi
      tag="${w}_${impl}_${n}"
      echo "=== $w $impl N=$n $(date +%T)"
      (cd /tmp && PYTHONPATH=$path timeout 600 $PYTHON -m torch.distributed.run --standalone --nproc_per_node="$n" \
         "$here/multi_gpu.py" "$w" "$impl" "$d" --out "$runs/$tag" $flag >"$OUT/log_$tag.txt" 2>&1) \
        || echo "FAILED (see log_$tag.txt: $(grep -m1 -E 'Error|RESULT .*FAILED' "$OUT/log_$tag.txt"))"
      grep '^RESULT' "$OUT/log_$tag.txt"
    done
  done
done
sinks="$OUT/multi_gpu.jsonl"; [ "$CPU" = 1 ] || sinks="$sinks $here/results/multi_gpu.jsonl"  # a dry run is no figure
$PYTHON - "$runs" "$commit" "$device" "$(nproc)" $sinks <<'PY'
import datetime, glob, json, os, statistics, sys
runs, commit, device, cores, *sinks = sys.argv[1:]
date = datetime.date.today().isoformat()
rows = []
for d in sorted(glob.glob(os.path.join(runs, "*"))):
    ranks = sorted((json.load(open(f)) for f in glob.glob(os.path.join(d, "rank*.json"))), key=lambda r: r["rank"])
    w, impl, n = os.path.basename(d).rsplit("_", 2)
    ok = [r for r in ranks if r.get("rate")]
    if len(ok) != int(n):
        print(f"{w} {impl} N={n}: {len(ok)} of {n} ranks reported; no row")
        continue
    rates = [r["rate"] for r in ok]
    rows.append(dict(workload=w, implementation=impl, ranks=int(n), per_gpu=round(statistics.mean(rates), 1),
                     min_rank=round(min(rates), 1), total=round(sum(rates), 1), unit=ok[0]["unit"],
                     rates=[round(x, 1) for x in rates], host_cores=int(cores), share=[r["share"] for r in ok],
                     threads=[r["peak_threads"] for r in ok], busy_threads=[r["busy_threads"] for r in ok],
                     children=[r["peak_children"] for r in ok], cores_used=[r["cores_used"] for r in ok],
                     omp_threads=ok[0]["omp_threads"], cpu_dry_run=ok[0]["cpu_dry_run"], date=date,
                     commit=commit, device=device))
for sink in sinks:
    with open(sink, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
one = {(r["workload"], r["implementation"]): r["per_gpu"] for r in rows if r["ranks"] == 1}
print(f"\n| workload | impl | N | per GPU | vs N=1 | slowest rank | cores used (sum) | busy threads (sum) |"
      f"   ({date}, {commit}, {device}, {cores} cores)\n|---|---|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["workload"], r["implementation"], r["ranks"])):
    base = one.get((r["workload"], r["implementation"]))
    ratio = f"{r['per_gpu'] / base:.2f}" if base else ""
    print(f"| {r['workload']} | {r['implementation']} | {r['ranks']} | {r['per_gpu']} {r['unit']} | {ratio} | "
          f"{r['min_rank']} | {sum(r['cores_used']):.1f} | {sum(r['busy_threads'])} |")
PY
