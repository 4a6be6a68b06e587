# Final side-by-side: DALI from the carried parts, sluice's wheels, the data, the programs, then cuda tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p /tmp/kit && cp .kit/p04 /tmp/kit/ && ls /tmp/kit
cat /tmp/kit/p0* > /tmp/kit/kit.tar && mkdir -p /tmp/kit/w && tar xf /tmp/kit/kit.tar -C /tmp/kit/w && rm /tmp/kit/p0* /tmp/kit/kit.tar
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dali /tmp/kit/w/*.whl 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/lite/*.whl .whl/gen/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH
(PYTHONPATH=/tmp/site python3 benchmarks/peers/gen.py images /tmp/sbs/images 8192 >/dev/null 2>&1 &)
PYTHONPATH=/tmp/site python3 benchmarks/peers/gen.py audio /tmp/sbs/wav 1024 10 && PYTHONPATH=/tmp/site python3 benchmarks/peers/gen.py flac /tmp/sbs/wav /tmp/sbs/flac
while pgrep -f "gen.py images" >/dev/null; do sleep 1; done
COMMIT=${COMMIT:-unknown} bash benchmarks/dali_side_by_side.sh ${WORKS:-train decode val audio audio_flac train_cpu audio_mixed}
PYTHONPATH=/tmp/site:$PWD/src timeout ${TEST_S:-150} python3 -m pytest -q -m cuda -p no:cacheprovider ${TESTS:-tests/pipeline tests/ops/decoders/test_image_whole_batch.py tests/ops/audio} 2>&1 | tail -4
