#!/usr/bin/env bash
# One call on the GPU machine: install the carried wheels, run the cuda-marked tests, then the benchmarks named
# on the command line. Logs and JSON rows go to $OUT (the device tool brings them back).
#   bash benchmarks/device_run.sh tests engine decode train audio video
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
for group in .whl/*/; do
  [ -d "$group" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$group"*.whl 2>&1 | tail -2
done
export PYTHONPATH=/tmp/site:$PWD/src
export SLUICE_BENCH_OUT=$OUT/bench.jsonl SLUICE_CACHE=/tmp/sluice_cache
nvidia-smi -L; python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
python3 - <<'PY'
for name in ("av", "soundfile", "soxr", "simplejpeg", "PyNvVideoCodec", "nvidia.nvimgcodec", "triton", "cv2"):
    try:
        mod = __import__(name, fromlist=["x"]); print(name, getattr(mod, "__version__", "ok"))
    except Exception as e:
        print(name, "MISSING", type(e).__name__, e)
PY
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) python3 -m pytest -q -m cuda -p no:cacheprovider -rfE tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -60 ;;
    tests-*) python3 -m pytest -q -m cuda -p no:cacheprovider -rfE "tests/${step#tests-}" 2>&1 | tail -40 ;;
    engine) python3 benchmarks/engine_overhead.py --iterations 3000 ;;
    decode) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/decode_images.py /tmp/imagenet_like 2>&1 | grep --line-buffered -v '^INFO' ;;
    decode-diag) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/decode_diag.py /tmp/imagenet_like 2>&1 | grep --line-buffered -v '^INFO' ;;
    decode-ceiling) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/decode_ceiling.py /tmp/imagenet_like ${CEIL_ARGS:-} 2>&1 | grep --line-buffered -v '^INFO' ;;
    decode-profile) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/decode_profile.py /tmp/imagenet_like 2>&1 | grep --line-buffered -E '^(PROFILE|PHASE)|Error|error' ;;
    profile) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/stack_profile.py /tmp/imagenet_like --seconds ${PROFILE_SECONDS:-12} 2>&1 | grep -v '^INFO' ;;
    scan-micro) python3 benchmarks/scan_check_micro.py ;;
    train) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
           python3 benchmarks/train_pipeline.py /tmp/imagenet_like --memory-seconds ${MEMORY_SECONDS:-120} 2>&1 | grep -v "^INFO" ;;
    memory) [ -d /tmp/imagenet_like ] || python3 benchmarks/make_imagenet_like.py /tmp/imagenet_like --photos .benchdata/photos | tail -2
            python3 benchmarks/train_pipeline.py /tmp/imagenet_like --memory-only --memory-iters 10000 \
              --memory-seconds ${MEMORY_SECONDS:-480} --memory-batch-size ${MEMORY_BATCH:-64} 2>&1 | grep -v "^INFO" ;;
    audio) python3 benchmarks/make_audio.py --out /tmp/audio_bench | tail -2
           python3 benchmarks/audio_pipeline.py --root /tmp/audio_bench --threads 16 --batch 64 ${AUDIO_ARGS:-} ;;
    audio-profile) [ -d /tmp/audio_bench ] || python3 benchmarks/make_audio.py --out /tmp/audio_bench | tail -2
           python3 benchmarks/audio_pipeline.py --root /tmp/audio_bench --threads 16 --batch 64 \
             --profile ${PROFILE_SECONDS:-12} ;;
    read-sweep) [ -d /tmp/audio_bench ] || python3 benchmarks/make_audio.py --out /tmp/audio_bench | tail -2
           python3 benchmarks/read_sweep.py /tmp/audio_bench --threads 1 2 4 8 16 ;;
    whisper) python3 examples/whisper_logmel.py --n-mels 80 --batch 32 --threads 16 ;;
    video) python3 benchmarks/make_videos.py --out /tmp/video_bench --durations ${VIDEO_DURATIONS:-60 300 3000} | tail -4
           python3 benchmarks/video_clips.py --videos /tmp/video_bench --sessions 7 ${VIDEO_ARGS:-} ;;
    video-diag) python3 benchmarks/make_videos.py --out /tmp/video_bench --durations 60 | tail -2
           python3 benchmarks/video_nvdec_diag.py --video /tmp/video_bench/h264_1280x720_60fps_60s.mp4 ${DIAG_ARGS:-}
           python3 benchmarks/video_clips.py --videos /tmp/video_bench --only 60 --no-sequential --no-variants ;;
    video-stamps) python3 benchmarks/make_videos.py --out /tmp/video_bench --durations 60 | tail -1
           python3 benchmarks/video_nvdec_diag.py --video /tmp/video_bench/h264_1280x720_60fps_60s.mp4 --sections stamps ;;
    torch) python3 examples/proxy_video_clips.py --device mixed --workers 4 ;;
    demo) python3 -m sluice.cli demo --output "$OUT/demo.png" 2>&1 | tr '\r' '\n' | grep -v 'batch/s' ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== done $(date +%T)"
