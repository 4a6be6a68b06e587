"""Arguments are checked where the user wrote them, by the schema's types and ranges (``Arg(min=, max=)``), not
when the pipeline runs; per-sample values (DataNodes) are checked per sample, naming the sample. The reference is
DALI: its Pipeline refuses ``num_threads`` and ``batch_size`` below 1 (-1 being its "unset" default)."""

import numpy as np
import pytest

import sluice
from sluice import fn
from sluice.errors import ArgumentError, PipelineError
from sluice.schema import REGISTRY, get_schema


def _in_pipeline(build):
    pipe = sluice.Pipeline(batch_size=2, num_threads=1, device_id=None, seed=0)
    with pipe:
        images = fn.external_source(source=lambda: [np.zeros((8, 8, 3), np.uint8)] * 2, layout="HWC")
        return build(images)


@pytest.mark.parametrize("op,call,argument,message", [
    ("decoders.image_crop", lambda x: fn.decoders.image_crop(x, crop=(-5, 20)), "crop", "at least 0"),
    ("crop", lambda x: fn.crop(x, crop=(-10, -10)), "crop", "at least 0"),
    ("crop", lambda x: fn.crop(x, crop_h=-1), "crop_h", "at least 0"),
    ("spectrogram", lambda x: fn.spectrogram(x, nfft=-1), "nfft", "at least 1"),
    ("spectrogram", lambda x: fn.spectrogram(x, window_length=0), "window_length", "at least 1"),
    ("readers.file", lambda x: fn.readers.file(file_root=".", num_shards=0), "num_shards", "at least 1"),
    ("resize", lambda x: fn.resize(x, resize_shorter=-4), "resize_shorter", "at least 0"),
])
def test_a_constant_out_of_range_is_refused_where_it_is_written(op, call, argument, message):
    with pytest.raises(ArgumentError) as info:
        _in_pipeline(call)
    assert type(info.value) is ArgumentError
    text = str(info.value)
    assert text.startswith(f"fn.{op}: argument '{argument}' must be {message}"), text


def test_a_per_sample_value_out_of_range_names_its_sample():
    pipe = sluice.Pipeline(batch_size=3, num_threads=1, device_id=None, seed=0)
    with pipe:
        images = fn.external_source(source=lambda: [np.zeros((8, 8, 3), np.uint8)] * 3, layout="HWC")
        heights = fn.external_source(source=lambda: [np.float32(4), np.float32(-2), np.float32(4)])
        pipe.set_outputs(fn.crop(images, crop_h=heights, crop_w=4.0))
    with pytest.raises(PipelineError) as info:
        pipe.run()
    assert type(info.value) is PipelineError and info.value.sample == 1
    text = str(info.value)
    assert "fn.crop" in text and "on sample 1" in text and "'crop_h' must be at least 0, got -2" in text, text
    pipe.close()


def test_in_range_values_still_work():
    pipe = sluice.Pipeline(batch_size=2, num_threads=1, device_id=None, seed=0)
    with pipe:
        images = fn.external_source(source=lambda: [np.arange(64 * 3, dtype=np.uint8).reshape(8, 8, 3)] * 2,
                                    layout="HWC")
        pipe.set_outputs(fn.crop(images, crop=(4, 2)))
    (out,) = pipe.run()
    assert [tuple(s) for s in out.shape()] == [(4, 2, 3)] * 2
    pipe.close()


def test_every_default_is_in_its_range_and_one_below_is_refused():
    get_schema("resize")  # registers every operator
    checked = 0
    for schema in REGISTRY.values():
        for arg in schema.args.values():
            if arg.min is None:
                continue
            if arg.default is not None and not arg.required:
                arg.check_range(f"fn.{schema.name}", arg.default)
            with pytest.raises(ArgumentError, match=f"argument '{arg.name}' must be (at least|between)"):
                arg.convert(f"fn.{schema.name}", [arg.min - 1] if isinstance(arg.type, str) else arg.min - 1)
            checked += 1
    assert checked >= 25


@pytest.mark.parametrize("kwargs,message", [
    ({"num_threads": 0}, "argument 'num_threads' must be at least 1 (or -1 for the default), got 0"),
    ({"num_threads": -3}, "argument 'num_threads' must be at least 1 (or -1 for the default), got -3"),
    ({"batch_size": "4"}, "argument 'batch_size' expects int, got '4' (str)"),
    ({"batch_size": 0}, "argument 'batch_size' must be at least 1 (or -1 for the default), got 0"),
    ({"batch_size": -1}, "batch_size must be a positive integer"),
    ({"num_threads": 2.5}, "argument 'num_threads' expects int"),
    ({"py_num_workers": 0}, "argument 'py_num_workers' must be at least 1, got 0"),
    ({"py_start_method": "thread"}, "invalid py_start_method ('thread')"),
    ({"device_id": -2}, "argument 'device_id' must be at least 0, got -2"),
])
def test_pipeline_arguments_are_checked_at_construction(kwargs, message):
    args = {"batch_size": 2, "device_id": None, **kwargs}
    with pytest.raises(ArgumentError) as info:
        sluice.Pipeline(**args)
    assert type(info.value) is ArgumentError and isinstance(info.value, (TypeError, ValueError))
    assert str(info.value).startswith("Pipeline: ") and message in str(info.value), str(info.value)


def test_num_threads_minus_one_is_the_default_as_in_dali():
    pipe = sluice.Pipeline(batch_size=2, num_threads=-1, device_id=None)
    assert pipe.num_threads >= 1
