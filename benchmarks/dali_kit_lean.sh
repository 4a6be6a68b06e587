#!/usr/bin/env bash
# DALI 2.4 (CUDA 13) alone, for benchmarks/dali_side_by_side.sh on the GPU machine: the wheels of
# ../shared/device/dali_kit.sh without those sluice needs (they travel in .whl/), split into 61 MiB parts
# .kit/p00 .. .kit/p04 (git-ignored), so that a call carries one part and the working tree within 64 MiB.
# On the device, carry the parts in back-to-back calls (the machine goes back 30 s after a call), each call doing
#   mkdir -p /tmp/kit && cp .kit/p0N /tmp/kit/
# and once all are there:
#   cat /tmp/kit/p0* > /tmp/kit/kit.tar && mkdir -p /tmp/kit/w && tar xf /tmp/kit/kit.tar -C /tmp/kit/w &&
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dali /tmp/kit/w/*.whl
set -euo pipefail
top=$(git rev-parse --show-toplevel)
grep -qx '/.kit/' "$top/.git/info/exclude" 2>/dev/null || echo '/.kit/' >> "$top/.git/info/exclude"
src=$(mktemp -d)
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d "$src" \
  nvidia-dali-cuda130==2.4.0 "nvidia-nvimgcodec-cu13==0.9.0.20" nvidia-nvjpeg nvidia-nvjpeg2k-cu13 \
  "nvidia-nvtiff-cu13>=0.8.0" "nvidia-libnvcomp-cu13==5.3.0.16" astunparse gast optree makefun nvtx "libcst~=1.8"
rm -rf "$top/.kit" && mkdir -p "$top/.kit"
tar cf "$src/kit.tar" -C "$src" $(cd "$src" && ls *.whl)
split -b 61m -d "$src/kit.tar" "$top/.kit/p"
rm -rf "$src"
ls -la "$top/.kit"
