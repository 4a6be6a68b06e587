"""one_hot against NumPy's ``np.eye(num_classes)[labels]`` (moved to ``axis``); exact."""

import numpy as np
import pytest
import torch

from sluice.ops.tensor.one_hot import one_hot_kernel


def test_scalar_and_single_element_give_vectors():
    np.testing.assert_array_equal(one_hot_kernel(torch.tensor(2), 4).numpy(), np.eye(4)[2])
    np.testing.assert_array_equal(one_hot_kernel(torch.tensor([3]), 5).numpy(), np.eye(5)[3])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_matrix_labels_matches_numpy(axis):
    labels = np.array([[0, 2, 1], [3, 3, 0]])
    ref = np.moveaxis(np.eye(4)[labels], -1, axis if axis >= 0 else 2)
    out = one_hot_kernel(torch.from_numpy(labels), 4, axis=axis).numpy()
    np.testing.assert_array_equal(out, ref)


def test_on_off_values_dtype_and_out_of_range():
    out = one_hot_kernel(torch.tensor([1, 7, -1]), 3, on_value=5, off_value=-1, dtype=torch.int32)
    assert out.dtype == torch.int32
    np.testing.assert_array_equal(out.numpy(), [[-1, 5, -1], [-1, -1, -1], [-1, -1, -1]])


def test_batched_stack_matches_per_sample():
    labels = torch.tensor([[1], [0], [2]])
    out = one_hot_kernel(labels, 3, batched=True)
    np.testing.assert_array_equal(out.numpy(), np.eye(3)[[1, 0, 2]])


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_classes"):
        one_hot_kernel(torch.tensor(0), 0)
    with pytest.raises(ValueError, match="axis"):
        one_hot_kernel(torch.tensor([1, 2]), 3, axis=5)


@pytest.mark.cuda
def test_cuda_equals_cpu():
    labels = torch.tensor([[0, 2], [1, 1]])
    torch.testing.assert_close(one_hot_kernel(labels.cuda(), 3, axis=0).cpu(), one_hot_kernel(labels, 3, axis=0))
