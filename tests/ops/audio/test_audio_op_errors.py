"""Wrong arguments and wrong inputs to the audio operators: clear errors naming the operator and the argument."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.errors import ArgumentError
from sluice.testing import run_op

from _audio_signals import sweep

X = [sweep(1000).astype(np.float32)]


@pytest.mark.parametrize("op,args,match", [
    ("spectrogram", {"power": 3}, "power"),
    ("spectrogram", {"window_lenght": 3}, "window_length"),          # typo: the message suggests the name
    ("mel_filter_bank", {"mel_formula": "foo"}, "mel_formula"),
    ("mfcc", {"dct_type": 5}, "dct_type"),
    ("preemphasis_filter", {"border": "wrap"}, "border"),
    ("decoders.audio", {"out_of_bounds_policy": "wrap"}, "out_of_bounds_policy"),
])
def test_schema_rejects_bad_arguments(op, args, match):
    with pytest.raises(ArgumentError, match=match):
        run_op(op, X, **args)


@pytest.mark.parametrize("op,inputs,args,match", [
    ("spectrogram", [np.zeros((100, 2), np.float32)], {}, "downmix"),
    ("spectrogram", X, {"window_length": 256, "nfft": 128}, "nfft"),
    ("spectrogram", X, {"window_length": 256, "window_fn": [1.0, 2.0]}, "window_fn"),
    ("mel_filter_bank", [np.ones((129, 5), np.float32)], {"freq_low": 30000.0}, "freq_low"),
    ("mfcc", [np.ones((10, 5), np.float32)], {"n_mfcc": 20}, "n_mfcc"),
    ("mfcc", [np.ones((10, 5), np.float32)], {"n_mfcc": 5, "dct_type": 1, "normalize": True}, "normalize"),
    ("audio_resample", X, {}, "exactly one"),
    ("audio_resample", X, {"in_rate": 0.0, "out_rate": 16000.0}, "rates"),
    ("power_spectrum", X, {"axis": 3}, "axis"),
    ("nonsilent_region", X, {"window_length": 0}, "window_length"),
    ("decoders.audio", [np.zeros(10, np.float32)], {}, "uint8"),
])
def test_kernels_reject_bad_inputs(op, inputs, args, match):
    with pytest.raises(Exception, match=match) as info:
        run_op(op, inputs, **args)
    assert op in str(info.value)          # the pipeline names the failing operator
