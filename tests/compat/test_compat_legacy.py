"""The legacy names and arguments of DALI on sluice: every alias warns naming its replacement and builds that
operator; old arguments are translated; anything unsupported raises NotImplementedError naming it."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch

import sluice
from sluice.compat import NotSupportedError
from sluice.compat._legacy import FN_ALIASES, OPS_ALIASES, class_path
from sluice.compat.dali import Pipeline, fn, math, ops, pipeline_def, tensors, types
from sluice.compat.dali.plugin import pytorch as dali_torch
from sluice.errors import ArgumentError, PipelineError
from sluice.pipeline.batch import Batch
from sluice.schema import _camel
from sluice.tfrecord import FixedLenFeature, string


def _walk(root, dotted):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


_READER_ARGS = {
    "readers.tfrecord": {"path": ["x.tfrecord"], "features": {"a": FixedLenFeature((), string, "")}},
    "readers.coco": {"file_root": "/nonexistent", "annotations_file": "instances.json"},
    "readers.nemo_asr": {"manifest_filepaths": ["manifest.json"]},
}


def _inputs_and_args(target):
    """Enough inputs and arguments to build a node of ``target`` (nothing runs)."""
    if target in _READER_ARGS:
        return [], dict(_READER_ARGS[target])
    if target.startswith("readers."):
        if "video" in target:
            return [], {"filenames": ["clip.mp4"], "sequence_length": 2}
        return [], {"file_root": "/nonexistent", **({"sequence_length": 2} if "sequence" in target else {})}
    if target.startswith("random."):
        return [], {}
    args = {"scale": 0.5} if target == "audio_resample" else {}
    count = 3 if target == "decoders.image_slice" else 1  # data, anchor, shape
    return [fn.external_source(name=f"data{i}") for i in range(count)], args


def _target_of(outputs):
    if isinstance(outputs, dict):  # named outputs (readers.tfrecord)
        outputs = list(outputs.values())
    node = outputs[0] if isinstance(outputs, list) else outputs
    return node.op


@pytest.mark.parametrize("alias", sorted(FN_ALIASES))
def test_fn_aliases_warn_and_build_their_replacement(alias):
    target, device = FN_ALIASES[alias]
    inputs, args = _inputs_and_args(target)
    with pytest.warns(DeprecationWarning, match=f"fn.{alias} is deprecated; use fn.{target}"):
        op = _target_of(_walk(fn, alias)(*inputs, **args))
    assert op.schema.name == target
    assert op.device == (device or op.schema.default_device)


@pytest.mark.parametrize("alias", sorted(OPS_ALIASES))
def test_ops_aliases_warn_and_build_their_replacement(alias):
    target, device = OPS_ALIASES[alias]
    inputs, args = _inputs_and_args(target)
    with pytest.warns(DeprecationWarning, match=f"ops.{alias} is deprecated; use ops.{class_path(target)}"):
        instance = _walk(ops, alias)(**args)
    *path, _ = target.split(".")
    assert isinstance(instance, _walk(sluice.ops, ".".join([*path, _camel(target)])))  # sluice's own class
    op = _target_of(instance(*inputs))
    assert op.schema.name == target
    assert op.device == (device or op.schema.default_device)


def test_current_names_do_not_warn_and_keep_signatures():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn.resize(fn.external_source(name="x"), resize_x=4)
        ops.decoders.Image(device="cpu")(fn.external_source(name="y"))
    assert inspect.signature(fn.resize) == inspect.signature(sluice.fn.resize)
    assert fn.readers.file.__doc__ == sluice.fn.readers.file.__doc__


def test_crop_mirror_normalize_legacy_arguments():
    images = fn.external_source(name="images", layout="HWC")
    with pytest.warns(DeprecationWarning) as record:
        out = fn.crop_mirror_normalize(images, output_dtype=types.FLOAT16, output_layout=types.NCHW,
                                       image_type=types.RGB, crop=(4, 4), crop_d=0)
    assert {str(w.message) for w in record} == {
        "fn.crop_mirror_normalize: argument 'output_dtype' is deprecated; use 'dtype'",
        "fn.crop_mirror_normalize: argument 'image_type' is deprecated and ignored (it has no effect)"}
    assert out.op.const_args["dtype"] is types.FLOAT16 and out.op.const_args["output_layout"] == "CHW"
    assert out.op.const_args["image_type"] is None
    with pytest.raises(ArgumentError, match="not both"):
        fn.crop_mirror_normalize(images, output_dtype=types.FLOAT, dtype=types.FLOAT)
    volume = fn.crop_mirror_normalize(fn.external_source(name="v", layout="DHWC"), crop_d=16, crop_h=8, crop_w=8)
    assert volume.op.const_args["crop_d"] == 16  # volumes pass through to sluice's volumetric kernels


def test_legacy_cmn_runs_like_the_new_one():
    data = [np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe(legacy):
        images = fn.external_source(source=[data], layout="HWC", cycle=True)
        if legacy:
            cmn = ops.CropMirrorNormalize(output_dtype=types.FLOAT, output_layout=types.NCHW, crop=(4, 4),
                                          mean=[10.0], std=[2.0], image_type=types.RGB)
            return cmn(images)
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(4, 4), mean=[10.0],
                                        std=[2.0])

    with pytest.warns(DeprecationWarning):
        legacy = pipe(True).run()[0].as_tensor()
    current = pipe(False).run()[0].as_tensor()
    torch.testing.assert_close(legacy, current, rtol=0, atol=0)
    expected = (torch.tensor(data[0][1:5, 2:6], dtype=torch.float32).permute(2, 0, 1) - 10) / 2
    torch.testing.assert_close(legacy[0], expected)


def test_decoder_tuning_arguments():
    jpegs = fn.external_source(name="jpegs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # performance-only: accepted silently
        fn.decoders.image(jpegs, cache_size=100, cache_type="threshold", memory_stats=True, seed=3)
    with pytest.warns(DeprecationWarning, match="'split_stages' is deprecated and ignored"):
        fn.decoders.image(jpegs, split_stages=True)


def test_unsupported_arguments_name_operator_and_argument():
    with pytest.raises(NotImplementedError, match=r"fn.resize: argument 'resize_depth' is not supported"):
        fn.resize(fn.external_source(name="a"), resize_depth=3)
    with pytest.raises(NotSupportedError, match=r"ops.Resize: argument 'bogus'"):
        ops.Resize(bogus=1)
    # volumes are supported: their arguments pass through
    fn.resize(fn.external_source(name="b"), resize_z=2)
    fn.crop(fn.external_source(name="c"), crop_d=2, crop_h=2, crop_w=2, crop_pos_z=0.0)


# names of older DALI releases, or outside DALI 2.4's fn: every name of its fn resolves (test_dali_fn_names.py)
@pytest.mark.parametrize("where, name", [(fn, "old_color_twist"), (fn.readers, "nemo_asr_v2"), (ops, "OldColorTwist"),
                                         (ops.readers, "NemoAsrV2"), (types, "DALITensorLayout"), (math, "erf"),
                                         (dali_torch, "feed_gpu_tensor")])
def test_missing_names_raise_not_implemented(where, name):
    with pytest.raises(NotImplementedError, match=f"nvidia.dali.*{name} is not provided by sluice"):
        getattr(where, name)
    assert not hasattr(where, name)  # also an AttributeError, so capability probes keep working


def test_known_missing_callables_raise_when_used():
    with pytest.raises(NotImplementedError, match="SPARSE_COO_TAG"):
        dali_torch.DALIRaggedIterator([], ["x"], output_types=[dali_torch.DALIRaggedIterator.SPARSE_COO_TAG])


def test_ragged_iterator_lists_and_dense_outputs():
    lengths = [2, 5, 3]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        ragged = fn.external_source(source=lambda: [np.arange(n, dtype=np.int32) for n in lengths])
        dense = fn.external_source(source=lambda: [np.full(2, n, dtype=np.int32) for n in lengths])
        return ragged, dense

    tags = dali_torch.DALIRaggedIterator
    loader = tags(pipe(), ["ragged", "dense"], size=3, output_types=[tags.SPARSE_LIST_TAG, tags.DENSE_TAG])
    (batch,) = next(iter(loader))
    assert [t.tolist() for t in batch["ragged"]] == [list(range(n)) for n in lengths]
    assert batch["dense"].shape == (3, 2)


def test_pipeline_constructor_follows_dali():
    pipe = Pipeline(2, 1, None, 5, True, 2, True, 0, False, -1, 0, exec_dynamic=True)
    assert (pipe.batch_size, pipe.num_threads, pipe.device_id, pipe.seed) == (2, 1, None, 5)
    with pytest.raises(NotImplementedError, match="py_callback_pickler"):
        Pipeline(batch_size=2, py_callback_pickler=object())
    with pytest.raises(NotImplementedError, match="serialize"):
        pipe.serialize()
    with pytest.raises(NotImplementedError, match="debug"):
        pipeline_def(debug=True)


def test_pipeline_output_checks_and_legacy_methods():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, output_dtype=[types.FLOAT, types.INT32])
    def checked():
        return fn.random.uniform(range=(0, 1)), fn.cast(fn.random.coin_flip(), dtype=types.FLOAT)

    with pytest.raises(PipelineError, match="output 1 has dtype torch.float32"):
        checked().run()

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, output_ndim=1)
    def fine():
        return fn.random.uniform(range=(0, 1), shape=[3])

    pipe = fine()
    pipe.build()
    pipe.schedule_run()
    (out,) = pipe.share_outputs()
    pipe.release_outputs()
    assert out.shape() == [(3,), (3,)]


def test_tensor_list_checks_and_constructors():
    cpu = Batch([torch.zeros(2, 3), torch.ones(4, 3)])
    assert isinstance(cpu, tensors.TensorListCPU) and not isinstance(cpu, tensors.TensorListGPU)
    assert isinstance(torch.zeros(3), tensors.TensorCPU) and not isinstance(torch.zeros(3), tensors.TensorGPU)
    assert not isinstance(np.zeros(3), tensors.TensorListCPU)
    built = tensors.TensorListCPU(np.arange(6).reshape(2, 3), "X")
    assert isinstance(built, Batch) and built.layout() == "X" and built.shape() == [(3,), (3,)]
    assert built.at(1).tolist() == [3, 4, 5]
    ragged = tensors.TensorListCPU([np.zeros(2), np.zeros(5)])
    assert ragged.shape() == [(2,), (5,)] and not ragged.is_dense_tensor()


def test_types_constant_and_math():
    assert isinstance(types.Constant(3, types.UINT8), types.ScalarConstant)
    signal = np.array([-2.0, 0.5, 3.0], dtype=np.float32)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = types.Constant(signal, device="cpu")
        return math.abs(x), math.pow(x, 2), x * types.Constant(2, types.FLOAT), math.clamp(x, -1, 1)

    absolute, squared, doubled, clamped = pipe().run()
    np.testing.assert_array_equal(clamped.at(0), np.clip(signal, -1, 1))
    np.testing.assert_array_equal(absolute.at(1), np.abs(signal))
    np.testing.assert_allclose(squared.at(0), signal ** 2)
    np.testing.assert_array_equal(doubled.at(0), signal * 2)
    assert dali_torch.to_torch_type[types.FLOAT16] is torch.float16


def test_video_readers_yield_labels_as_dali_does():
    with pytest.warns(DeprecationWarning):
        alone = ops.VideoReader(device="cpu", filenames=["clip.mp4"], sequence_length=2)()
    assert not isinstance(alone, list)  # filenames without labels: only the frames
    labelled = ops.readers.Video(filenames=["clip.mp4"], labels=[4], sequence_length=2)()
    assert isinstance(labelled, list) and len(labelled) == 2
    with_frame_num = fn.readers.video(filenames=["clip.mp4"], sequence_length=2, enable_frame_num=True)
    assert len(with_frame_num) == 2  # frames, frame numbers


def test_backend_and_data_node_modules():
    from sluice.compat.dali import backend, data_node

    assert backend.TensorListCPU is tensors.TensorListCPU
    backend.ReleaseUnusedMemory()
    backend.PreallocateDeviceMemory(1 << 20, 0)
    assert isinstance(fn.random.coin_flip(), data_node.DataNode)
    with pytest.raises(NotImplementedError, match=r"backend.GetCudaVersion .*Available here: Preallocate"):
        backend.GetCudaVersion()


def test_dali_class_names():
    assert ops.MFCC.schema.name == "mfcc" and ops.RandomBBoxCrop.schema.name == "random_bbox_crop"
    assert issubclass(ops.MFCC, sluice.ops.MFCC)
    assert ops.readers.VideoResize.schema.name == "readers.video_resize"


def test_jax_plugin_needs_jax():
    from sluice.compat.dali import plugin

    try:
        import jax  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install jax"):
            plugin.jax  # noqa: B018
    else:
        from sluice.jax import DALIGenericIterator as JaxIterator

        assert plugin.jax.DALIGenericIterator is JaxIterator


def test_functions_and_classes_pickle_by_reference():
    import pickle

    for obj in (fn.readers.file, fn.decoders.image, fn.file_reader, fn.experimental.decoders.image, ops.Resize,
                ops.readers.File, ops.nvJPEGDecoder, ops.experimental.decoders.Image):
        assert pickle.loads(pickle.dumps(obj)) is obj


def test_dali_current_names_that_differ_from_sluice():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        node = fn.experimental.decoders.video(fn.external_source(name="v"), device="cpu")
        instance = ops.experimental.decoders.Video(device="cpu")
    assert node.op.schema.name == "decoders.video" and instance.schema.name == "decoders.video"


def test_readers_default_to_dalis_single_shard():
    jpegs, _ = fn.readers.file(file_root="/nonexistent")
    assert (jpegs.op.const_args["shard_id"], jpegs.op.const_args["num_shards"]) == (0, 1)
    jpegs, _ = fn.readers.file(file_root="/nonexistent", shard_id=1, num_shards=4)
    assert (jpegs.op.const_args["shard_id"], jpegs.op.const_args["num_shards"]) == (1, 4)
    reader = ops.readers.File(file_root="/nonexistent", shard_id=1, num_shards=2)
    jpegs, _ = reader(name="Reader")  # arguments of the call add to the constructor's
    assert (jpegs.op.const_args["shard_id"], jpegs.op.const_args["num_shards"]) == (1, 2)


def test_version_parses_and_names_sluice():
    from packaging.version import Version

    from sluice.compat import dali

    version = Version(dali.__version__)
    assert version.local.startswith("sluice") and version >= Version("1.0")


def test_with_pipeline_and_set_outputs():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=3)
    with pipe:
        pipe.set_outputs(fn.random.coin_flip(probability=1.0))
    (out,) = pipe.run()
    assert out.as_tensor().tolist() == [1, 1]


def test_video_decoder_arguments_moot_in_sluice_are_accepted():
    """DALI's decoders.video arguments that sluice's exact packet index or its thread model make moot
    (dali/operators/video/decoder/video_decoder_cpu.cc): accepted and dropped, not NotSupportedError."""
    from sluice.compat._legacy import translate
    from sluice.schema import get_schema

    args = translate(get_schema("decoders.video"), "fn.experimental.decoders.video",
                     {"frames": [0, 1], "build_index": True, "affine": False})
    assert args == {"frames": [0, 1]}
