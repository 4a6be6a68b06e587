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
    with pytest.raises(ArgumentError, match="'shape' cannot be a DataNode"):
        fn.random.uniform(shape=node)


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
