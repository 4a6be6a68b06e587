#!/usr/bin/env bash
# On the GPU machine, once per lease (source it): sluice's wheels from the carried .whl/<group>/ folders into /tmp/site,
# sluice's compiled core built from this tree's sources into /tmp/sluice_src (its files compiled in parallel),
# DALI 2.4's kit parts (.kit/p0N, carried one a call) gathered under /tmp/kit and installed into /tmp/dali once all five
# are there; the core is rebuilt only when its sources changed. Exports PYTHONPATH for sluice
# (/tmp/site:/tmp/sluice_src), SITE and DALI_PATH for dali_side_by_side.sh.
#   source benchmarks/device_setup.sh
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p /tmp/site /tmp/kit
for group in "$top"/.whl/*/; do
  [ -d "$group" ] && ls "$group"*.whl >/dev/null 2>&1 && \
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$group"*.whl 2>&1 | grep -v WARNING | tail -2
done
for part in "$top"/.kit/p0*; do [ -f "$part" ] && cp "$part" /tmp/kit/; done
if [ "$(ls /tmp/kit/p0* 2>/dev/null | wc -l)" = 5 ] && [ ! -d /tmp/dali/nvidia/dali ]; then
  cat /tmp/kit/p0* > /tmp/kit/kit.tar && mkdir -p /tmp/kit/w && tar xf /tmp/kit/kit.tar -C /tmp/kit/w && rm /tmp/kit/kit.tar
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dali /tmp/kit/w/*.whl 2>&1 | grep -v WARNING | tail -2
  # sluice's mixed image decoder takes nvImageCodec from the same kit
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/kit/w/nvidia_nvimgcodec*.whl \
    /tmp/kit/w/nvidia_nvjpeg-*.whl 2>&1 | grep -v WARNING | tail -2
fi
rm -rf /tmp/sluice_src && mkdir -p /tmp/sluice_src && cp -r "$top/src/sluice" /tmp/sluice_src/
inc="-I$(python3 -c 'import pybind11; print(pybind11.get_include())') $(python3-config --includes)"
mkdir -p /tmp/core_obj
so="_core$(python3-config --extension-suffix)"
stamp=$(cat "$top"/src/sluice/_core/*.cpp "$top"/src/sluice/_core/*.h | md5sum | cut -d' ' -f1)
if [ -f "/tmp/core_obj/$so" ] && [ "$(cat /tmp/core_obj/stamp 2>/dev/null)" = "$stamp" ]; then
  cp "/tmp/core_obj/$so" /tmp/sluice_src/sluice/          # the core's sources did not change since the last build
else
  for f in "$top"/src/sluice/_core/*.cpp; do
    g++ -O3 -fPIC -std=c++17 -ffp-contract=off -fvisibility=hidden -pthread $inc -c "$f" -o "/tmp/core_obj/$(basename "$f" .cpp).o" &
  done
  wait
  g++ -shared -pthread /tmp/core_obj/*.o -ldl -o "/tmp/core_obj/$so" && echo "$stamp" > /tmp/core_obj/stamp
  cp "/tmp/core_obj/$so" /tmp/sluice_src/sluice/
fi
export PYTHONPATH=/tmp/site:/tmp/sluice_src SITE=/tmp/site:/tmp/sluice_src DALI_PATH=/tmp/dali
python3 -c "import sluice, sluice.native as n; print('sluice core', n.available())"
