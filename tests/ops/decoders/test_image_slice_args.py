"""fn.decoders.image_slice with one input and DALI's slice arguments (start / rel_start, end / rel_end / shape /
rel_shape), next to the three-input form (data, anchor, shape). Windows are checked against NumPy slicing of
the Pillow-decoded image (lossless PNG: exact), with DALI's rounding (halves away from zero)."""

from __future__ import annotations

import numpy as np
import pytest
from image_fixtures import encode, pattern, run_decoder, with_orientation

from sluice import fn, pipeline_def
from sluice.errors import PipelineError, SampleError

IMG = pattern(30, 40)  # H=30, W=40
PNG = encode(IMG, "PNG")


@pytest.mark.parametrize("args, window", [
    (dict(start=[5, 8], end=[30, 20]), np.s_[8:20, 5:30]),                      # x, y (axis_names="WH")
    (dict(start=[5, 8], shape=[25, 12]), np.s_[8:20, 5:30]),
    (dict(rel_start=[0.25, 0.5], rel_shape=[0.5, 0.5]), np.s_[15:30, 10:30]),
    (dict(rel_start=[0.25, 0.5], rel_end=[0.75, 1.0]), np.s_[15:30, 10:30]),
    (dict(rel_start=[0.5, 0.0], shape=[7, 9]), np.s_[0:9, 20:27]),               # relative and absolute mixed
    (dict(start=[2.5, 1.5], shape=[4, 4]), np.s_[2:6, 3:7]),                     # halves round away from zero
    (dict(end=[10, 6]), np.s_[0:6, 0:10]),                                       # start defaults to 0
    (dict(start=[8, 3], end=[20, 9], axis_names="HW"), np.s_[8:20, 3:9]),
    (dict(start=[3], end=[9], axis_names="H"), np.s_[3:9, :]),
    (dict(rel_start=[0.5], axes=[1]), np.s_[:, 20:40]),
    (dict(start=[8, 3], shape=[12, 6], axes=[0, 1]), np.s_[8:20, 3:9]),
])
def test_window_from_arguments(args, window):
    out = run_decoder("decoders.image_slice", [PNG], **args)
    np.testing.assert_array_equal(out.at(0), IMG[window])


def test_arguments_and_inputs_give_the_same_window():
    by_args = run_decoder("decoders.image_slice", [PNG], rel_start=[0.1, 0.2], rel_shape=[0.6, 0.5])
    by_inputs = run_decoder("decoders.image_slice", [PNG], extra=([[0.1, 0.2]], [[0.6, 0.5]]))
    np.testing.assert_array_equal(by_args.at(0), by_inputs.at(0))
    np.testing.assert_array_equal(by_args.at(0), IMG[6:21, 4:28])


def test_window_refers_to_the_upright_image():
    out = run_decoder("decoders.image_slice", [with_orientation(IMG, 6, "PNG")], start=[0, 0], shape=[5, 7])
    np.testing.assert_array_equal(out.at(0), np.rot90(IMG, -1)[:7, :5])


def test_out_of_bounds():
    with pytest.raises(SampleError, match="outside"):
        run_decoder("decoders.image_slice", [PNG], start=[30, 0], shape=[20, 10])
    out = run_decoder("decoders.image_slice", [PNG], start=[30, 0], shape=[20, 10],
                      out_of_bounds_policy="trim_to_shape")
    np.testing.assert_array_equal(out.at(0), IMG[0:10, 30:40])


@pytest.mark.parametrize("args, extra, match", [
    (dict(start=[1, 1], rel_start=[0.1, 0.1]), (), "only one of"),
    (dict(end=[5, 5], shape=[3, 3]), (), "only one of"),
    (dict(start=[0.1, 0.1]), ([[0.1, 0.1]], [[0.5, 0.5]]), "only one of"),     # anchor input and start
    (dict(start=[1, 2, 3]), (), "3 values for 2 sliced axes"),
    (dict(start=[10, 10], end=[5, 20]), (), "ends"),
    (dict(start=[10, 10], end=[10, 20]), (), "empty window"),
    (dict(axis_names="WC", start=[1, 1]), (), "axis_names"),
    (dict(axes=[2], start=[1]), (), "axes"),
])
def test_bad_windows_raise(args, extra, match):
    with pytest.raises(SampleError, match=match):
        run_decoder("decoders.image_slice", [PNG], extra=extra, **args)


def test_anchor_without_shape_input_raises():
    with pytest.raises(SampleError, match="both the anchor and the shape"):
        run_decoder("decoders.image_slice", [PNG], extra=([[0.1, 0.1]],))


@pipeline_def(batch_size=2, num_threads=2, device_id=None, exec_async=False)
def _slice_pipe(one_input: bool):
    data = fn.external_source(source=lambda: [np.frombuffer(PNG, np.uint8)] * 2, cycle=True)
    if one_input:
        start = fn.external_source(source=lambda: [np.float32([0, 0]), np.float32([10, 5])], cycle=True)
        return fn.decoders.image_slice(data, start=start, shape=[8, 6], device="cpu")
    anchor = fn.external_source(source=lambda: [np.float32([0, 0]), np.float32([10, 5])], cycle=True)
    shape = fn.external_source(source=lambda: [np.float32([8, 6])] * 2, cycle=True)
    return fn.decoders.image_slice(data, anchor, shape, normalized_anchor=False, normalized_shape=False,
                                   device="cpu")


@pytest.mark.parametrize("one_input", [True, False])
def test_per_sample_windows_in_a_pipeline(one_input):
    (out,) = _slice_pipe(one_input).run()
    np.testing.assert_array_equal(out.at(0), IMG[0:6, 0:8])
    np.testing.assert_array_equal(out.at(1), IMG[5:11, 10:18])


def test_pipeline_error_names_the_operator():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None, exec_async=False)
    def pipe():
        data = fn.external_source(source=lambda: [np.frombuffer(PNG, np.uint8)], cycle=True)
        return fn.decoders.image_slice(data, start=[0, 0], end=[100, 10], device="cpu")

    with pytest.raises(PipelineError, match="decoders.image_slice.*outside"):
        pipe().run()


@pytest.mark.cuda
def test_mixed_matches_cpu_with_arguments():
    img = pattern(96, 128)
    data = [encode(img, "JPEG", quality=95, subsampling=0)] * 3
    args = dict(rel_start=[0.1, 0.2], rel_shape=[0.5, 0.4])
    gpu = run_decoder("decoders.image_slice", data, device="mixed", jpeg_fancy_upsampling=True, **args)
    cpu = run_decoder("decoders.image_slice", data, **args)
    assert gpu.device == "gpu" and gpu.shape() == cpu.shape() == [(39, 64, 3)] * 3  # y 19:58, x 13:77
    for i in range(3):
        diff = np.abs(gpu[i].cpu().numpy().astype(int) - cpu.at(i).astype(int))
        assert diff.mean() <= 1.0 and diff.max() <= 12
