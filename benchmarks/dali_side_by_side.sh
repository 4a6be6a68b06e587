#!/usr/bin/env bash
# DALI users' own programs (benchmarks/peers/side_by_side.py, a verbatim copy of ../shared/peers) run with DALI
# 2.4 and with sluice on the same files in one call on the GPU machine; only the import differs. Prints a ratio
# table and appends one JSON row per run to benchmarks/results/dali_side_by_side.jsonl (and $OUT).
#   bash benchmarks/dali_side_by_side.sh [WORKLOAD...]     (default: every image, audio and video workload)
# Workloads over data of real shape: speech (speech_side_by_side.py, Jasper's preprocessing over 2048 utterances of
# LibriSpeech's spread of lengths, 16 kHz WAV), speech_flac (the same files as FLAC), whisper (whisper_side_by_side.py,
# 5-45 s clips), train_real (side_by_side.py's train program over make_imagenet_real.py's JPEGs of ImageNet's sizes
# and kinds). `real` names these four. effnet_autoaug and effnet_trivial: effnet_side_by_side.py, DALI's EfficientNet
# training input with auto_augment / trivial_augment_wide, over the JPEGs of `train`; torch_function and conditional
# (a torchvision v2 transform as torch_python_function; per-sample if/elif/else), over the same JPEGs; ssd (SSD300's
# COCO training input, ssd_side_by_side.py) and nnunet3d (nnU-Net's 3-D loader, nnunet_side_by_side.py), over data
# their scripts make. `programs` names these six.
# Video workloads are named <program>_<seconds>s (video_frames_60s, video_reader_600s; `video` names all six): the
# program of side_by_side.py on a barcoded 720p60 H.264 file of that length (made once by gen_video.py: gen.py's
# frames, encoded in parallel segments), NCLIPS (64) clips of 16 frames, every frame checked by its barcode.
# Environment: IMPLS ("dali sluice"), DALI_PATH (/tmp/dali: DALI's wheels, installed from dali_kit.sh's parts),
# SITE (/tmp/site: sluice's wheels), DATA (/tmp/sbs: where the data sets are made once), REPEAT (1: runs per
# workload and implementation, alternating; the best is kept), AV_PATH (/tmp/avonly: PyAV alone, installed there
# from a carried av wheel under .whl/ if missing, for DALI's video runs: the programs check frames with PyAV).
# DALI's environment and sluice's stay apart: DALI runs with only DALI_PATH (and AV_PATH) on its path, sluice
# without it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); top=$(dirname "$here")
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$here/results"
IMPLS=${IMPLS:-dali sluice}; DALI_PATH=${DALI_PATH:-/tmp/dali}; SITE=${SITE:-/tmp/site}; DATA=${DATA:-/tmp/sbs}
REPEAT=${REPEAT:-1}; AV_PATH=${AV_PATH:-/tmp/avonly}
videos="video_frames_60s video_frames_180s video_frames_600s video_reader_60s video_reader_180s video_reader_600s"
works=""; for w in ${*:-train decode val train_cpu audio audio_mixed audio_flac video}; do
  case $w in video) works="$works $videos";; real) works="$works speech speech_flac whisper train_real";;
    programs) works="$works effnet_autoaug effnet_trivial torch_function conditional ssd nnunet3d";;
    *) works="$works $w";; esac
done
export NCLIPS=${NCLIPS:-64}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
gen="$here/peers/gen.py"
case " $works " in *" train"*|*" decode "*|*" val "*|*effnet*|*torch_function*|*conditional*) [ -d "$DATA/images" ] || { echo "making 8192 JPEGs"; PYTHONPATH=$SITE python3 "$gen" images "$DATA/images" 8192; };; esac
case " $works " in *" audio"*) [ -d "$DATA/wav" ] || { echo "making 1024 WAVs"; PYTHONPATH=$SITE python3 "$gen" audio "$DATA/wav" 1024 10; };; esac
for w in $works; do
  case $w in video_*_*s) s=${w##*_}; s=${s%s}
    [ -f "$DATA/video$s.mp4" ] || { echo "making a $s s video"; PYTHONPATH=$SITE python3 "$here/gen_video.py" "$DATA/video$s.mp4" "$s"; };;
  esac
done
case " $works " in *audio_flac*) [ -d "$DATA/flac" ] || PYTHONPATH=$SITE python3 "$gen" flac "$DATA/wav" "$DATA/flac";; esac
case " $works " in *" speech "*) [ -d "$DATA/speech" ] || PYTHONPATH=$SITE python3 "$here/make_speech.py" "$DATA/speech" --files 2048;; esac
case " $works " in *speech_flac*) [ -d "$DATA/speech_flac" ] || PYTHONPATH=$SITE python3 "$here/make_speech.py" "$DATA/speech_flac" --files 2048 --format flac;; esac
case " $works " in *whisper*) [ -d "$DATA/whisper" ] || PYTHONPATH=$SITE python3 "$here/whisper_side_by_side.py" make "$DATA/whisper" 256;; esac
case " $works " in *" ssd "*) [ -d "$DATA/ssd" ] || PYTHONPATH=$SITE python3 "$here/ssd_side_by_side.py" make "$DATA/ssd" 2048;; esac
case " $works " in *nnunet3d*) [ -d "$DATA/nnunet" ] || PYTHONPATH=$SITE python3 "$here/nnunet_side_by_side.py" make "$DATA/nnunet" 32;; esac
case " $works " in *train_real*) [ -d "$DATA/images_real" ] || PYTHONPATH=$SITE python3 "$here/make_imagenet_real.py" "$DATA/images_real" --count 8192;; esac
commit=${COMMIT:-$(cd "$top" && git rev-parse --short HEAD 2>/dev/null || echo unknown)}  # COMMIT: the device copy may lack the history
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
log="$OUT/side_by_side.log"; : > "$log"
for w in $works; do
  case $w in
    audio|audio_mixed) d="$DATA/wav";; audio_flac) d="$DATA/flac";; train_real) d="$DATA/images_real";;
    speech|speech_flac|whisper|ssd) d="$DATA/$w";; nnunet3d) d="$DATA/nnunet";; *) d="$DATA/images";;
  esac
  prog=$w; [ "$w" = train_real ] && prog=train
  case $w in video_*_*s) prog=${w%_*}; s=${w##*_}; d="$DATA/video${s%s}.mp4";; video_*) d="$DATA/video.mp4";; esac
  for r in $(seq "$REPEAT"); do
    for impl in $IMPLS; do
      [ "$impl" = dali ] && [ "$w" = audio_mixed ] && continue   # sluice's own path, shown beside DALI's audio
      if [ "$impl" = dali ]; then path=$DALI_PATH; else path=$SITE:$top/src; fi
      # The video programs count frames and check barcodes with PyAV: DALI's runs get PyAV alone beside DALI.
      case "$impl $w" in "dali video_"*) path=$DALI_PATH:$AV_PATH
        [ -d "$AV_PATH/av" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$AV_PATH" \
          "$top"/.whl/*/av-*.whl >/dev/null 2>&1;; esac
      case $w in
        speech|speech_flac) cmd=("$here/speech_side_by_side.py" "$impl" "$d" --name "$w");;
        effnet_autoaug) cmd=("$here/effnet_side_by_side.py" "$impl" "$d" --policy autoaug);;
        effnet_trivial) cmd=("$here/effnet_side_by_side.py" "$impl" "$d" --policy trivial);;
        whisper) cmd=("$here/whisper_side_by_side.py" "$impl" "$d");;
        ssd) cmd=("$here/ssd_side_by_side.py" "$impl" "$d");;
        nnunet3d) cmd=("$here/nnunet_side_by_side.py" "$impl" "$d");;
        torch_function|conditional) cmd=("$here/${w}_side_by_side.py" "$impl" "$d");;
        *) cmd=("$here/peers/side_by_side.py" "$prog" "$impl" "$d");;
      esac
      line=$(cd /tmp && PYTHONPATH=$path timeout 300 python3 "${cmd[@]}" 2>"$OUT/err_${w}_${impl}.log" \
             | grep '^RESULT' | tail -1 | sed -E "s/^RESULT *($prog|whisper[0-9]*) /RESULT $w /")
      [ -n "$line" ] || line="RESULT $w $impl FAILED (see err_${w}_${impl}.log: $(tail -1 "$OUT/err_${w}_${impl}.log"))"
      echo "$line" | tee -a "$log"
    done
  done
done
python3 - "$log" "$commit" "$device" "$here/results/dali_side_by_side.jsonl" "$OUT/dali_side_by_side.jsonl" <<'PY'
import datetime, json, sys
log, commit, device, *sinks = sys.argv[1:]
best = {}
for line in open(log):
    p = line.split()
    if len(p) < 5 or p[3] == "FAILED":
        continue
    key = (p[1], p[2])
    best[key] = max(best.get(key, (0, ""))[0], float(p[3])), p[4]
date = datetime.date.today().isoformat()
rows = [dict(workload=w, implementation=i, rate=r, unit=u, date=date, commit=commit, device=device)
        for (w, i), (r, u) in best.items()]
for sink in sinks:
    with open(sink, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
print(f"\n| workload | DALI 2.4 | sluice | sluice / DALI |   ({date}, {commit}, {device})\n|---|---|---|---|")
for w in dict.fromkeys(w for w, _ in best):
    d = best.get((w, "dali"), (None,))[0]
    ref = "audio" if w == "audio_mixed" else w
    d_ref = best.get((ref, "dali"), (None,))[0]
    s = best.get((w, "sluice"), (None,))[0]
    ratio = f"{s / d_ref:.2f}x" + (" (of DALI's audio)" if ref != w else "") if s and d_ref else ""
    print(f"| {w} | {d or ''} | {s or ''} | {ratio} |")
PY
