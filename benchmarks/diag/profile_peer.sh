#!/usr/bin/env bash
# py-spy profile of one side_by_side.py workload in its steady state (a longer copy of the program: its timed
# loop is made 20x longer so that the profile sees only the steady state).
#   bash benchmarks/diag/profile_peer.sh WORKLOAD IMPL DATA [WARMUP_S] [SECONDS]    (LONG: the audio loops' length
#   in epochs, 20)
set -uo pipefail
work=$1 impl=$2 data=$3 warm=${4:-12} secs=${5:-12}
OUT=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")/.." && pwd)
long=/tmp/side_by_side_long.py
sed -e 's/    n = 40$/    n = 4000/' -e 's/    n = 30$/    n = 3000/' -e 's/    n = 20$/    n = 300/' \
    -e "s|    n = len(files) // bs\$|    n = ${LONG:-20} * len(files) // bs|" "$here/peers/side_by_side.py" > $long
cp "$here/peers/gen.py" /tmp/gen.py
python3 $long "$work" "$impl" "$data" > "$OUT/prof_${work}_${impl}.out" 2>&1 &
pid=$!
sleep "$warm"
for mode in gil idle; do
  flag=--gil; [ $mode = idle ] && flag=--idle
  py-spy record $flag --threads --pid $pid -d "$secs" -f raw -o "$OUT/pyspy_${work}_${impl}_${mode}.txt" >/dev/null 2>&1 \
    || echo "py-spy failed ($mode)"
done
kill $pid 2>/dev/null; wait $pid 2>/dev/null
for mode in gil idle; do
  echo "--- py-spy $work $impl --$mode"
  python3 "$here/diag/pyspy_summary.py" "$OUT/pyspy_${work}_${impl}_${mode}.txt" --top 30 2>&1 | head -80
done
