"""fn.transforms.* against the matrices DALI's documentation defines, written out with NumPy: translation, scale,
rotation (2-D and 3-D), shear (factors and angles), crop, combine; centers, input matrices and reverse_order."""

import numpy as np
import pytest

import sluice
from sluice import fn, types


def _run(graph, batch_size=3):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=7)
    def pipe():
        out = graph()
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    out = p.run()
    p.close()
    return [[b.at(i) for i in range(batch_size)] for b in out]


def _h(m):
    return np.vstack([m, np.eye(m.shape[1])[-1:]])


def _about(a, c):
    t = np.asarray(c) - a @ np.asarray(c)
    return np.hstack([a, t[:, None]])


def test_each_transform_matches_its_formula():
    (tr, sc, rot, sh, sha, cr, rot3), = [_run(lambda: [
        fn.transforms.translation(offset=[3.0, -2.0]),
        fn.transforms.scale(scale=[2.0, 0.5], center=[10.0, 20.0]),
        fn.transforms.rotation(angle=30.0, center=[4.0, 6.0]),
        fn.transforms.shear(shear=[0.3, -0.1]),
        fn.transforms.shear(angles=[10.0, 20.0], center=[1.0, 2.0]),
        fn.transforms.crop(from_start=[0, 0], from_end=[640, 480], to_start=[-1, -1], to_end=[1, 1]),
        fn.transforms.rotation(angle=90.0, axis=[0, 0, 2]),
    ])]
    c, s = np.cos(np.radians(30)), np.sin(np.radians(30))
    refs = [np.array([[1, 0, 3], [0, 1, -2]]),
            _about(np.diag([2.0, 0.5]), [10, 20]),
            _about(np.array([[c, -s], [s, c]]), [4, 6]),
            np.array([[1, 0.3, 0], [-0.1, 1, 0]]),
            _about(np.array([[1, np.tan(np.radians(10))], [np.tan(np.radians(20)), 1]]), [1, 2]),
            np.array([[2 / 640, 0, -1], [0, 2 / 480, -1]]),
            np.array([[0, -1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])]
    for got, ref in zip((tr, sc, rot, sh, sha, cr, rot3), refs):
        assert got[0].dtype == np.float32 and got[0].shape == ref.shape
        np.testing.assert_allclose(got[0], ref, atol=1e-6)


def test_input_matrix_order_combine_and_per_sample_args():
    def graph():
        angle = fn.random.uniform(range=[-45.0, 45.0])
        offset = fn.random.uniform(range=[-5.0, 5.0], shape=[2])
        rot = fn.transforms.rotation(angle=angle)
        shift = fn.transforms.translation(offset=offset)
        after = fn.transforms.translation(rot, offset=offset)                       # shift after rotating
        before = fn.transforms.translation(rot, offset=offset, reverse_order=True)  # shift before rotating
        combined = fn.transforms.combine(rot, shift)                               # rotate, then shift
        reversed_ = fn.transforms.combine(rot, shift, reverse_order=True)
        return angle, offset, after, before, combined, reversed_

    angle, offset, after, before, combined, reversed_ = _run(graph)
    assert len({float(a) for a in angle}) == 3  # per-sample angles
    for i in range(3):
        c, s = np.cos(np.radians(angle[i])), np.sin(np.radians(angle[i]))
        r = _h(np.array([[c, -s, 0], [s, c, 0]]))
        t = _h(np.array([[1, 0, offset[i][0]], [0, 1, offset[i][1]]]))
        np.testing.assert_allclose(after[i], (t @ r)[:2], atol=1e-5)
        np.testing.assert_allclose(before[i], (r @ t)[:2], atol=1e-5)
        np.testing.assert_allclose(combined[i], (t @ r)[:2], atol=1e-5)
        np.testing.assert_allclose(reversed_[i], (r @ t)[:2], atol=1e-5)


def test_errors_name_the_argument():
    with pytest.raises(Exception, match="exactly one of 'shear' and 'angles'"):
        _run(lambda: fn.transforms.shear(shear=[0.1, 0.2], angles=[1.0, 2.0]))
    with pytest.raises(Exception, match=r"\[-90, 90\]"):
        _run(lambda: fn.transforms.shear(angles=[100.0, 0.0]))
    with pytest.raises(Exception, match="3-D transform, but the arguments a 2-D one"):
        _run(lambda: fn.transforms.translation(fn.transforms.scale(scale=[1, 1, 1]), offset=[1, 2]))
    with pytest.raises(Exception, match="'center' has 3 values"):
        _run(lambda: fn.transforms.rotation(angle=3.0, center=[1, 2, 3]))
    assert types.FLOAT  # the compat names resolve too
    from sluice.compat.dali import fn as dali_fn
    assert dali_fn.transforms.combine is not None and dali_fn.experimental.filter is not None
