"""Speech preprocessing of NVIDIA's Jasper / QuartzNet kind, as their DALI pipelines write it, run with DALI and with
sluice: only the import differs.

    python benchmarks/speech_side_by_side.py IMPL ROOT [--batch 64] [--threads 16] [--cut STAGE]
    IMPL: dali | sluice;  ROOT: a folder of .wav or .flac files (benchmarks/make_speech.py)

The program (DeepLearningExamples' Jasper ``dali_asr_pipeline``, without the training-only augmentations):
readers.file -> decoders.audio(FLOAT, downmix, sample_rate=16000) -> nonsilent_region(-60 dB) -> slice(begin,
length, axes=[0]) -> .gpu() -> preemphasis_filter(0.97) -> spectrogram(nfft 512, 20 ms windows, 10 ms step) ->
mel_filter_bank(64) -> to_decibels(ln, reference 1, floor 1e-20) -> normalize(axes=[1]) -> pad(axes=[1],
align 16); batch 64, 16 threads, through DALIGenericIterator. Prints
``RESULT speech IMPL RATE utt/s`` after a warm-up epoch, over ``--epochs`` epochs. ``--cut`` returns the program's output after
an earlier stage (decode, nonsilent, slice, gpu), to see where the time goes.
"""
import argparse
import glob
import importlib
import math
import os
import time

import numpy as np

RATE = 16000


def build(base: str, files: list, batch: int, threads: int, cut: str | None = None, flags: bool = False,
          int16: bool = False):
    """The pipeline function, written against ``base`` (``nvidia.dali`` or ``sluice``)."""
    pipeline_def = importlib.import_module(base).pipeline_def
    fn = importlib.import_module(base + ".fn")
    types = importlib.import_module(base + ".types")

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, seed=42)
    def speech():
        encoded, label = fn.readers.file(files=files, labels=list(range(len(files))), random_shuffle=True,
                                         name="Reader")
        if int16:   # diagnostic: the stored samples up to the device, converted there (equal features)
            audio, _ = fn.decoders.audio(encoded, dtype=types.INT16, downmix=True)
        else:
            audio, _ = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True, sample_rate=float(RATE))
        if cut == "decode":
            return audio.gpu(), label
        begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
        if cut == "nonsilent":
            return begin.gpu(), label
        spelled = dict(normalized_anchor=False, normalized_shape=False) if flags else {}
        audio = fn.slice(audio, begin, length, axes=[0], **spelled)
        if cut == "slice":
            return audio, label
        audio = audio.gpu()
        if int16:
            audio = fn.cast(audio, dtype=types.FLOAT) * (1.0 / 32768)
        if cut == "gpu":
            return audio, label
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=512, window_length=int(0.02 * RATE), window_step=int(0.01 * RATE))
        mel = fn.mel_filter_bank(spec, sample_rate=RATE, nfilter=64)
        logmel = fn.to_decibels(mel, multiplier=np.log(10), reference=1.0, cutoff_db=math.log(1e-20))
        logmel = fn.normalize(logmel, axes=[1])
        logmel = fn.pad(logmel, axes=[1], fill_value=0, align=16)
        return logmel, label

    return speech


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("impl", choices=("dali", "sluice"))
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--cut", choices=("decode", "nonsilent", "slice", "gpu"), default=None)
    ap.add_argument("--spell-flags", action="store_true", help="pass normalized_anchor=False, normalized_shape=False "
                    "to slice (the same program: its inputs are integers, which DALI takes as absolute)")
    ap.add_argument("--int16", action="store_true", help="diagnostic: decode to INT16 and convert to float on the "
                    "device (the same features)")
    ap.add_argument("--name", default=None, help="the workload's name in the RESULT line (default speech, or "
                    "speech_flac for FLAC files)")
    a = ap.parse_args()
    import torch

    files = sorted(glob.glob(os.path.join(a.root, "**", "*.wav"), recursive=True) +
                   glob.glob(os.path.join(a.root, "**", "*.flac"), recursive=True))
    name = a.name or ("speech_flac" if files and files[0].endswith(".flac") else "speech")
    base = "nvidia.dali" if a.impl == "dali" else "sluice"
    plugin = importlib.import_module("nvidia.dali.plugin.pytorch" if a.impl == "dali" else "sluice.torch")
    pipe = build(base, files, a.batch, a.threads, a.cut, a.spell_flags, a.int16)()
    pipe.build()
    if a.cut:   # the outputs of earlier stages are ragged: the pipeline is run as it is, without the iterator
        batches = a.epochs * (len(files) // a.batch)
        for _ in range(len(files) // a.batch):
            pipe.run()
        torch.cuda.synchronize()
        t, n, shape = time.perf_counter(), batches * a.batch, None
        for _ in range(batches):
            pipe.run()
    else:
        loader = plugin.DALIGenericIterator(pipe, ["features", "label"], reader_name="Reader",
                                            last_batch_policy=plugin.LastBatchPolicy.DROP, auto_reset=True)
        for _ in loader:                                  # warm-up: one epoch
            pass
        torch.cuda.synchronize()
        t, n, shape = time.perf_counter(), 0, None
        for _ in range(a.epochs):
            for out in loader:
                n += out[0]["label"].shape[0]
                shape = tuple(out[0]["features"].shape)
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t)
    print(f"RESULT {name:13s} {a.impl:7s} {rate:10.1f} utt/s last_shape={shape}", flush=True)


if __name__ == "__main__":
    main()
