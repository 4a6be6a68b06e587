# ruff: noqa: I001, PLR0402
"""A DALI program in the style of an audio-visual loader: a ``Pipeline`` subclass whose ``define_graph`` moves
its external source to the GPU (``self.audio = self.input_audio().gpu()``) and whose ``iter_setup`` feeds that
moved node (``self.feed_input(self.audio, data)``: in DALI ``.gpu()`` keeps the source's name); a Spectrogram
with DALI's default window; a ``DALIGenericIterator`` without ``size`` or ``reader_name`` whose ``len()`` the
loop's progress bar takes (DALI: 0). Written afresh on generated sine sweeps; the DALI code is unchanged but for
the first import line (the CPU variant leaves out ``.gpu()``).

Reference: NumPy written from DALI's definitions (dali/kernels/signal/window/window_functions.h: Hann window
0.5 - 0.5 cos(2 pi (n + 0.5) / N); dali/operators/audio/fft/spectrogram.cc: centred windows, reflect padding,
|rfft|^2), to 2e-5 of the peak (float32 against float64).
"""

import sluice.compat; sluice.compat.install()  # the one line a DALI program adds

import numpy as np
import pytest
import nvidia.dali.ops as ops
from nvidia.dali import Pipeline
from nvidia.dali.plugin.pytorch import DALIGenericIterator

NFFT, WINDOW, STEP = 512, 400, 160


def sweeps(n_batches, batch_size):
    t = np.arange(8000) / 16000.0
    return [[(0.5 * np.sin(2 * np.pi * (200 + 300 * (b * batch_size + i)) * t * (1 + t))).astype(np.float32)
             for i in range(batch_size)] for b in range(n_batches)]


class AudioPipe(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, batches, device):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.batches, self.device, self.iteration = batches, device, 0
        self.input_audio = ops.ExternalSource()
        self.spectrogram = ops.Spectrogram(device=device, nfft=NFFT, window_length=WINDOW, window_step=STEP)

    def define_graph(self):
        if self.device == "gpu":
            self.audio = self.input_audio().gpu()
        else:
            self.audio = self.input_audio()
        return self.spectrogram(self.audio)

    def iter_setup(self):
        if self.iteration == len(self.batches):
            raise StopIteration
        self.feed_input(self.audio, self.batches[self.iteration])
        self.iteration += 1


def numpy_dali_spectrogram(x):
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * (np.arange(WINDOW) + 0.5) / WINDOW)
    padded = np.pad(x.astype(np.float64), WINDOW // 2, mode="reflect")
    windows = [padded[s:s + WINDOW] * hann for s in range(0, x.size + 1, STEP)]
    return (np.abs(np.fft.rfft(np.stack(windows), n=NFFT)) ** 2).T


def run_program(device):
    batches = sweeps(3, 2)
    pipe = AudioPipe(2, 2, 0 if device == "gpu" else None, batches, device)
    pipe.build()
    loader = DALIGenericIterator(pipe, ["spectrogram"])
    total = len(loader)  # what tqdm(total=len(loader)) takes: no size is known
    specs = [out[0]["spectrogram"] for out in loader]
    assert total == 0 and len(specs) == 3
    for batch, spec in zip(batches, specs):
        assert spec.device.type == ("cuda" if device == "gpu" else "cpu")
        for x, s in zip(batch, spec.cpu().numpy()):
            ref = numpy_dali_spectrogram(x)
            assert s.shape == ref.shape
            assert np.abs(s - ref).max() <= 2e-5 * ref.max()


def test_pipeline_subclass_program():
    run_program("cpu")


@pytest.mark.cuda
def test_pipeline_subclass_program_gpu():
    run_program("gpu")
