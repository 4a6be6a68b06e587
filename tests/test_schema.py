"""The schema is the single source of arguments: validation messages, signatures, fn and ops forms."""

import inspect

import numpy as np
import pytest

import sluice
from sluice import fn, ops, types
from sluice.errors import ArgumentError


def test_unknown_argument_names_operator_and_lists_valid_ones():
    with pytest.raises(ArgumentError) as e:
        fn.random.uniform(rnage=[0, 1])
    msg = str(e.value)
    assert "fn.random.uniform" in msg and "'rnage'" in msg and "Did you mean 'range'" in msg
    assert "shape" in msg and "dtype" in msg


def test_wrong_type_and_choices():
    with pytest.raises(ArgumentError, match=r"fn.random.coin_flip: argument 'probability' expects float"):
        fn.random.coin_flip(probability="high")
    with pytest.raises(ArgumentError, match=r"argument 'dtype' expects DALIDataType"):
        fn.cast(fn.random.uniform(), dtype=3)
    with pytest.raises(ArgumentError, match=r"invalid device \('tpu'\). Supported values are 'cpu', 'gpu'"):
        fn.random.uniform(device="tpu")


def test_per_sample_argument_only_where_allowed():
    node = fn.random.uniform(range=[0, 1])
    fn.random.coin_flip(probability=node)  # allowed
    with pytest.raises(ArgumentError, match="'dtype' cannot be a DataNode"):
        fn.random.uniform(dtype=node)
    fn.random.uniform(shape=node)  # a shape per sample, as in DALI


def test_signatures_are_real_and_documented():
    sig = inspect.signature(fn.random.uniform)
    assert sig.parameters["range"].default == [-1.0, 1.0]
    assert sig.parameters["range"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "Devices" in fn.random.uniform.__doc__ and "range" in fn.random.uniform.__doc__
    assert "fdata" in inspect.signature(fn.constant).parameters


def test_ops_class_form_validates_at_construction_and_runs():
    with pytest.raises(ArgumentError, match="unknown argument 'probabilty'"):
        ops.random.CoinFlip(probabilty=0.3)
    flip = ops.random.CoinFlip(probability=1.0)

    @sluice.pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=0)
    def pipe():
        return flip()

    (out,) = pipe().run()
    assert out.as_tensor().tolist() == [1, 1, 1]


def test_list_arguments_accept_scalars_and_arrays():
    node = fn.random.uniform(range=np.array([2.0, 3.0]))
    assert node.op.const_args["range"] == [2.0, 3.0]
    node = fn.constant(fdata=1.5, shape=[2])
    assert node.op.const_args["fdata"] == [1.5]


def test_types_map_to_torch():
    import torch

    assert types.to_torch_dtype(types.FLOAT16) is torch.float16
    assert types.from_torch_dtype(torch.uint8) is types.UINT8
    assert types.NCHW == "CHW" and types.INTERP_LINEAR.name == "INTERP_LINEAR"


def test_reused_sample_generator_gives_the_fresh_generators_values():
    """BatchContext.sample_rng(i, reuse=True) re-keys one generator: the same draws as a generator built per
    sample (and as the sample kernels' SampleContext.rng), for any seed, iteration and sample."""
    import numpy as np
    import torch

    from sluice.schema import BatchContext, SampleContext

    for seed, iteration in [(0, 0), (12345, 7), (2**64 - 3, 2**40)]:
        ctx = BatchContext("x", 4, [""] * 4, [""], torch.device("cpu"), None, seed, iteration)
        for i in (0, 3, 1, 3):
            fresh = ctx.sample_rng(i).random(7)
            np.testing.assert_array_equal(ctx.sample_rng(i, reuse=True).random(7), fresh)
            np.testing.assert_array_equal(SampleContext("x", i, "", "", seed, iteration).rng.random(7), fresh)
        # a half-used generator leaves nothing buffered for the next sample
        ctx.sample_rng(0, reuse=True).integers(0, 10, dtype=np.uint32)
        np.testing.assert_array_equal(ctx.sample_rng(2, reuse=True).integers(0, 2**32, 5, dtype=np.uint32),
                                      ctx.sample_rng(2).integers(0, 2**32, 5, dtype=np.uint32))
