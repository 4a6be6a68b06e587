"""fn.readers.nemo_asr against soundfile reading the same windows of the same files: manifests with offsets and
durations, filters, resampling, the outputs' types, only the window read, and bad manifests named in errors."""

import json

import numpy as np
import pytest
import soundfile

import sluice
from sluice import fn, types
from sluice.errors import PipelineError


def write_set(root, rate=16000):
    """Sine sweeps of different lengths (stereo and mono WAV, FLAC) and a manifest of windows of them."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for k, (seconds, channels, fmt) in enumerate([(1.0, 1, "WAV"), (2.0, 2, "WAV"), (1.5, 1, "FLAC"),
                                                  (0.5, 1, "WAV")]):
        t = np.arange(int(seconds * rate)) / rate
        sweep = 0.5 * np.sin(2 * np.pi * (200 + 400 * k) * t * (1 + t))
        data = np.stack([sweep, -sweep][:channels], -1)
        name = f"a{k}.{fmt.lower()}"
        soundfile.write(root / name, data, rate, format=fmt, subtype="PCM_16")
        entries.append({"audio_filepath": name, "duration": seconds * 0.5, "offset": seconds * 0.25,
                        "text": f"utterance {k} ünïcode"})
    (root / "manifest.json").write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    return str(root / "manifest.json"), entries


def read_asr(batch_size, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=3, exec_async=False)
    def pipe():
        out = fn.readers.nemo_asr(name="R", **kw)
        return tuple(out) if isinstance(out, list) else out

    p = pipe()
    return p, p.run()


def reference(root, e, dtype="float32", downmix=True):
    with soundfile.SoundFile(root / e["audio_filepath"]) as f:
        f.seek(round(e["offset"] * f.samplerate))
        data = f.read(round(e["duration"] * f.samplerate), dtype=dtype, always_2d=True)
        return (data.mean(1).astype(dtype) if downmix else data), f.samplerate


def test_windows_equal_soundfile(tmp_path):
    manifest, entries = write_set(tmp_path)
    p, (audio, rate, text, idxs) = read_asr(4, manifest_filepaths=[manifest], read_idxs=True)
    for k, e in enumerate(entries):
        want, sr = reference(tmp_path, e)
        assert audio[k].numpy().dtype == np.float32 and np.allclose(audio[k].numpy(), want, atol=1e-6)
        assert float(rate[k]) == sr
        assert bytes(text[k].numpy()).decode() == e["text"]
    assert idxs.as_tensor().flatten().tolist() == [0, 1, 2, 3] and audio.layout() == "t"
    assert audio.source_info[2].endswith("a2.flac")


def test_int16_stereo_and_only_the_window_is_read(tmp_path, monkeypatch):
    manifest, entries = write_set(tmp_path)
    _, out = read_asr(4, manifest_filepaths=[manifest], dtype=types.INT16, downmix=False, read_sample_rate=False,
                      read_text=False)
    audio = out if not isinstance(out, tuple) else out[0]
    want, _ = reference(tmp_path, entries[1], "int16", downmix=False)
    assert audio[1].numpy().dtype == np.int16 and np.array_equal(audio[1].numpy(), want)
    # libsndfile is asked for the window's frames only, after a seek to its start
    calls = []
    real_read, real_seek = soundfile.SoundFile.read, soundfile.SoundFile.seek

    def read(self, *args, **kwargs):
        calls.append(("read", kwargs.get("frames", args[0] if args else -1)))
        return real_read(self, *args, **kwargs)

    def seek(self, frame, *args, **kwargs):
        calls.append(("seek", frame))
        return real_seek(self, frame, *args, **kwargs)

    monkeypatch.setattr(soundfile.SoundFile, "read", read)
    monkeypatch.setattr(soundfile.SoundFile, "seek", seek)
    read_asr(1, manifest_filepaths=[manifest], read_text=False)
    assert calls[:2] == [("seek", 4000), ("read", 8000)]  # offset 0.25 s, duration 0.5 s at 16 kHz


def test_filters_and_resampling(tmp_path):
    manifest, entries = write_set(tmp_path)
    p, (audio, rate, _) = read_asr(2, manifest_filepaths=[manifest], min_duration=0.4, max_duration=0.9,
                                   sample_rate=8000.0)
    assert p.reader_meta("R")["epoch_size"] == 2  # durations 0.5 and 0.75 (of 0.5, 1.0, 0.75, 0.25)
    assert rate.as_tensor().tolist() == [8000.0, 8000.0]
    assert [s.numel() for s in audio] == [4000, 6000]


def test_bad_manifests_and_audio_are_named(tmp_path):
    manifest, entries = write_set(tmp_path)
    lines = open(manifest).read().splitlines()
    open(manifest, "w").write("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    with pytest.raises(ValueError, match="line 3 of manifest '.*manifest.json' is not JSON"):
        read_asr(2, manifest_filepaths=[manifest])
    open(manifest, "w").write("\n".join(lines[:1] + ['{"duration": 1.0}']) + "\n")
    with pytest.raises(ValueError, match="line 2 of manifest .* has no 'audio_filepath'"):
        read_asr(2, manifest_filepaths=[manifest])
    entries[0]["duration"] = 5.0
    open(manifest, "w").write("\n".join(json.dumps(e) for e in entries) + "\n")
    with pytest.raises(PipelineError, match=r"a0.wav.*reaches past its end.*\(line 1 of manifest"):
        read_asr(2, manifest_filepaths=[manifest])
    (tmp_path / "a1.wav").write_bytes(b"RIFF....WAVEfmt garbage")
    entries[0]["duration"] = 0.5
    open(manifest, "w").write("\n".join(json.dumps(e) for e in entries) + "\n")
    with pytest.raises(PipelineError, match=r"a1.wav.*\(line 2 of manifest"):
        read_asr(2, manifest_filepaths=[manifest])
