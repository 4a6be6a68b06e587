#!/usr/bin/env bash
# One device call: install the carried wheels, make the side-by-side data, run the named cuda test folders, then the
# named side-by-side workloads for sluice (IMPLS overrides) and py-spy profiles (PROFILE="train audio ...").
#   bash benchmarks/diag/device_check.sh "tests/ops/decoders tests/ops/readers" "train decode val"
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/tmp/site/bin:$PATH
[ -x /tmp/site/bin/py-spy ] || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import sluice.native as n; print('core', n.available())"
[ -d /tmp/sbs/images ] || python3 benchmarks/peers/gen.py images /tmp/sbs/images 8192
for t in ${1:-}; do python3 -m pytest -q -m cuda -p no:cacheprovider -x "$t" 2>&1 | tail -4; done
[ -n "${2:-}" ] && IMPLS=${IMPLS:-sluice} bash benchmarks/dali_side_by_side.sh $2
for w in ${PROFILE:-}; do
  d=/tmp/sbs/images; case $w in audio*) d=/tmp/sbs/wav;; esac
  bash benchmarks/diag/profile_peer.sh $w sluice $d ${PROFILE_WARM:-25} ${PROFILE_SECONDS:-8} 2>&1 | grep -v '^ *0\.[0-4] %' | head -${PROFILE_LINES:-70}
done
