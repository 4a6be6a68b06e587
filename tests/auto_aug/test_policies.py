"""AutoAugment, RandAugment and TrivialAugment Wide in pipelines (DALI's nvidia.dali.auto_aug semantics): every
sample gets the operations its random choice names, each once; the same seed gives the same images and another
seed others; the ``shape`` argument and its errors; custom policies and augmentations; both module names."""

import numpy as np
import pytest

import sluice
from sluice import fn, types
from sluice.auto_aug import augmentations as a
from sluice.auto_aug import auto_augment, rand_augment, trivial_augment
from sluice.auto_aug.core import Policy, augmentation, select, signed_bin

N = 12
SIZES = [(24, 32), (30, 20), (16, 16)]


def _images(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*SIZES[i % len(SIZES)], 3), dtype=np.uint8) for i in range(n)]


IMAGES = _images()


def _pipe(policy, images=IMAGES, seed=5, device="cpu", conditionals=True):
    @sluice.pipeline_def(enable_conditionals=conditionals, batch_size=len(images), num_threads=2,
                         device_id=0 if device == "gpu" else None, seed=seed)
    def pipe():
        x = fn.external_source(source=lambda: images, layout="HWC")
        data = x.gpu() if device == "gpu" else x
        # a policy given (data, shape) gets the images' shapes as a CPU node, as DALI needs them for argument inputs
        return policy(data, fn.shapes(x)) if policy.__code__.co_argcount == 2 else policy(data)

    return pipe()


def _outputs(policy, iterations=2, **kw):
    p = _pipe(policy, **kw)
    out = [[b.as_cpu().at(i) for i in range(len(b))] for (b,) in (p.run() for _ in range(iterations))]
    p.close()
    return out


@augmentation(mag_range=(0, 10), mag_to_param=lambda m: np.uint8(m))
def mark(data, value):
    """Every pixel becomes ``value`` (the magnitude)."""
    return data * sluice.Constant(0, types.UINT8) + value


def _marks(k):
    """``k`` augmentations that set every pixel to ``40 * i + magnitude``."""
    return [mark.augmentation(mag_range=(40 * i, 40 * i + 10), name=f"mark{i}") for i in range(k)]


def test_select_gives_each_sample_its_operation():
    choice = [i % 5 for i in range(N)]

    def policy(x):
        idx = fn.external_source(source=lambda: [np.int32(c) for c in choice])
        return select(_marks(5), idx, x, magnitude_bin=3, num_magnitude_bins=11)

    (out, _) = _outputs(policy)
    for i, img in enumerate(out):
        assert img.shape == IMAGES[i].shape
        assert (img == 40 * choice[i] + 3).all()


def _tree_of_ifs(ops, idx, *args, **kwargs):
    """DALI's select: a binary search over the index by `if` statements on DataNodes (the reference)."""
    from sluice.auto_aug.core._select import split_samples_among_ops
    from sluice.pipeline import conditionals

    return conditionals.call(split_samples_among_ops, 0, len(ops) - 1, ops, idx, args, kwargs)


#: images of one size: on the GPU a dense batch, split by one gather and merged by one
DENSE = list(np.random.default_rng(1).integers(0, 256, (N, *SIZES[0], 3), dtype=np.uint8))


@pytest.mark.parametrize("nested,images", [(False, IMAGES), (True, IMAGES), (False, DENSE)],
                         ids=["alone", "inside_an_if", "dense"])
def test_select_matches_the_tree_of_ifs(device, nested, images):
    """select's one many-way split and merge give what DALI's tree of `if` statements gives, with the wide suite
    (warps, colour, filters, reductions) on images of three sizes (and of one), some augmentations chosen by no
    sample."""
    suite = trivial_augment.get_trivial_augment_wide_suite(use_shape=True)
    rng = np.random.default_rng(3)
    choice = rng.choice([0, 2, 3, 5, 7, 8, 9, 10, 11, 13], N)   # 1, 4, 6 and 12 chosen by no sample
    bins = rng.integers(0, 31, N)
    outs = {}
    def make(chooser):
        def policy(x, shape):
            idx = fn.external_source(source=lambda: [np.int32(c) for c in choice])
            mag = signed_bin(fn.external_source(source=lambda: [np.int32(b) for b in bins]))
            kw = dict(magnitude_bin=mag, num_magnitude_bins=31, shape=shape, fill_value=128)
            if not nested:
                return chooser(suite, idx, x, **kw)
            if idx < 9:  # the choice made for some samples only, as auto_augment's steps are
                x = chooser(suite, idx, x, **kw)
            return x
        return policy

    for how, chooser in (("select", select), ("tree", _tree_of_ifs)):
        outs[how] = _outputs(make(chooser), images=images, device=device)
    for it, (got, want) in enumerate(zip(outs["select"], outs["tree"])):
        for i in range(N):
            np.testing.assert_array_equal(got[i], want[i], err_msg=f"iteration {it}, sample {i}")
    assert any(not np.array_equal(o, img) for o, img in zip(outs["select"][0], images))  # something was applied


def test_select_splits_each_input_once_and_merges_once():
    ops = _marks(6)

    @sluice.pipeline_def(enable_conditionals=True, batch_size=N, num_threads=1, device_id=None, seed=1)
    def pipe():
        x = fn.external_source(source=lambda: IMAGES, layout="HWC")
        idx = fn.external_source(source=lambda: [np.int32(i % 6) for i in range(N)])
        return select(ops, idx, x, magnitude_bin=fn.external_source(source=lambda: [np.int32(2)] * N),
                      num_magnitude_bins=11)

    p = pipe()
    p.build()
    names = [n.schema.name for n in p._executor.nodes]
    assert names.count("_conditional.split_n") == 2 and names.count("_conditional.merge_n") == 1  # images, bins
    assert "_conditional.split" not in names and "_conditional.merge" not in names
    (out,) = p.run()
    assert all((out.as_cpu().at(i) == 40 * (i % 6) + 2).all() for i in range(N))
    p.close()


POLICIES = {
    "auto_augment": lambda x, shape: auto_augment.auto_augment_image_net(x, shape=shape),
    "auto_augment_svhn": lambda x: auto_augment.auto_augment(x, "svhn", max_translate_abs=10, fill_value=None),
    "rand_augment": lambda x: rand_augment.rand_augment(x, n=2, m=9),
    "rand_augment_non_monotonic": lambda x, shape: rand_augment.rand_augment(x, n=1, m=20, monotonic_mag=False,
                                                                             shape=shape),
    "trivial_augment": lambda x, shape: trivial_augment.trivial_augment_wide(x, shape=shape,
                                                                             interp_type=types.INTERP_NN),
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_policies_same_seed_same_images_other_seed_others(name):
    first, second = _outputs(POLICIES[name], seed=5)
    again, _ = _outputs(POLICIES[name], seed=5)
    other, _ = _outputs(POLICIES[name], seed=6)
    changed = 0
    for i, img in enumerate(IMAGES):
        assert first[i].shape == img.shape and first[i].dtype == np.uint8
        np.testing.assert_array_equal(first[i], again[i])
        changed += not np.array_equal(first[i], img)
    assert changed >= N // 3
    assert any(not np.array_equal(x, y) for x, y in zip(first, other))
    assert any(not np.array_equal(x, y) for x, y in zip(first, second))  # new draws every iteration


def test_trivial_augment_draws_an_operation_and_a_bin_per_sample():
    marks = _marks(6)
    out = [img[0, 0, 0] for it in _outputs(lambda x: trivial_augment.apply_trivial_augment(
        marks, x, num_magnitude_bins=11), images=_images(32), iterations=3) for img in it]
    ops, bins = [v // 40 for v in out], [v % 40 for v in out]
    assert set(ops) == set(range(6)) and len(set(bins)) >= 8 and max(bins) <= 10


def test_rand_augment_applies_n_operations_in_sequence():
    @augmentation(mag_range=(0, 10), mag_to_param=lambda m: np.uint8(m))
    def add(data, value):
        return data + value

    @augmentation
    def double(data, _):
        return data * sluice.Constant(2, types.UINT8)

    zeros = [np.zeros((4, 5, 3), np.uint8)] * 16
    out = _outputs(lambda x: rand_augment.apply_rand_augment([add, double], x, n=3, m=6), images=zeros,
                   iterations=1)[0]
    seen = set()
    for img in out:  # three steps of +2 (bin 6 of 31 in 0..10) or *2 from 0: 0, 2, 4, 6, 8, 12
        assert (img == img[0, 0, 0]).all()
        seen.add(int(img[0, 0, 0]))
    assert seen <= {0, 2, 4, 6, 8, 12} and len(seen) >= 3


def test_custom_policy_probabilities_and_steps():
    m0, m1, m2 = _marks(3)
    policy = Policy("marks", num_magnitude_bins=11, sub_policies=[[(m0, 1.0, 3)], [(m1, 1.0, 7), (m2, 0.5, 1)]])
    values = {int(img[0, 0, 0]) for it in _outputs(lambda x: auto_augment.apply_auto_augment(policy, x),
                                                    images=_images(32), iterations=2) for img in it}
    assert values == {3, 47, 81}  # m0 at 3; m1 at 7, then m2 at 1 with probability one half
    with pytest.warns(Warning, match="probability 0"):
        Policy("p", 11, [[(m0, 0.0, 1)]])
    with pytest.raises(ValueError, match="needs a magnitude bin"):
        Policy("p", 11, [[(m0, 0.5, None)]])
    with pytest.raises(ValueError, match=r"\[0, 10\]"):
        Policy("p", 11, [[(m0, 0.5, 11)]])
    with pytest.raises(TypeError, match="@augmentation"):
        Policy("p", 11, [[(lambda x, p: x, 0.5, 1)]])
    renamed = Policy("p", 11, [[(m0, 0.5, 1), (m0.augmentation(), 0.5, 2)]])
    assert sorted(renamed.augmentations) == ["0__mark0", "1__mark0"]


def test_shape_argument_and_its_errors():
    # relative translations follow each sample's shape: a DataNode of shapes, or one (H, W) for all
    for shape in (lambda x: fn.shapes(x), lambda x: (20, 20)):
        out = _outputs(lambda x: rand_augment.rand_augment(x, n=1, m=30, shape=shape(x), fill_value=0,
                                                           excluded=[n for n in _suite_names() if n != "translate_x"]),
                       iterations=1)[0]
        for img, src in zip(out, IMAGES):  # m=30: the largest shift, 100/224 of the width, either way
            assert img.shape == src.shape and (img == 0).all(axis=2).any(axis=0).sum() >= 5
    with pytest.raises(Exception, match="needs the `shape` argument"):
        _pipe(lambda x: rand_augment.apply_rand_augment(rand_augment.get_rand_augment_suite(use_shape=True), x, 1, 3))
    with pytest.raises(ValueError, match="max_translate_abs cannot be used with image shapes"):
        _pipe(lambda x: trivial_augment.trivial_augment_wide(x, shape=fn.shapes(x), max_translate_abs=10))
    with pytest.raises(ValueError, match="max_translate_rel needs image shapes"):
        _pipe(lambda x: trivial_augment.trivial_augment_wide(x, max_translate_rel=0.5))
    with pytest.raises(ValueError, match="reduced_image_net"):
        _pipe(lambda x: auto_augment.auto_augment(x, "reduced_image_net", shape=(10, 10)))


def _suite_names():
    return [aug.name for aug in rand_augment.get_rand_augment_suite()]


def test_argument_errors():
    with pytest.raises(ValueError, match="policy_name"):
        _pipe(lambda x: auto_augment.auto_augment(x, "cifar"))
    with pytest.raises(ValueError, match="`blur` is in excluded"):
        _pipe(lambda x: trivial_augment.trivial_augment_wide(x, excluded=["blur"]))
    with pytest.raises(ValueError, match=r"\[0, 30\]"):
        _pipe(lambda x: rand_augment.rand_augment(x, n=2, m=31))
    with pytest.raises(Exception, match="'shape'.*none of its augmentations"):
        _pipe(lambda x: trivial_augment.apply_trivial_augment([a.equalize], x, shape=(4, 4)))
    with pytest.warns(Warning, match="n=0"):
        _pipe(lambda x: rand_augment.rand_augment(x, n=0, m=3))
    with pytest.raises(RuntimeError, match="enable_conditionals=True"):
        _pipe(POLICIES["trivial_augment"], conditionals=False)
    with pytest.raises(ValueError, match="random_sign, or seed and shape"):
        signed_bin(3, random_sign=fn.random.uniform(values=[0, 1], dtype=types.INT32), seed=1)


def test_through_the_dali_names():
    import sluice.compat.dali as dali
    from sluice.compat.dali.auto_aug import augmentations, trivial_augment as dali_trivial

    assert dali.auto_aug.auto_augment is auto_augment and dali_trivial is trivial_augment
    assert augmentations.rotate is a.rotate

    @dali.pipeline_def(enable_conditionals=True, batch_size=N, num_threads=2, device_id=None, seed=5)
    def pipe():
        x = dali.fn.external_source(source=lambda: IMAGES, layout="HWC")
        return dali_trivial.trivial_augment_wide(x, shape=fn.shapes(x), interp_type=types.INTERP_NN)

    (out,) = pipe().run()
    expected = _outputs(POLICIES["trivial_augment"], iterations=1)[0]
    for i in range(N):
        np.testing.assert_array_equal(out.at(i), expected[i])


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(POLICIES))
def test_gpu_policies_equal_cpu_ones(name):
    cpu = _outputs(POLICIES[name], iterations=1)[0]
    gpu = _outputs(POLICIES[name], iterations=1, device="gpu")[0]
    again = _outputs(POLICIES[name], iterations=1, device="gpu")[0]
    for c, g, g2 in zip(cpu, gpu, again):
        np.testing.assert_array_equal(g, g2)
        diff = np.abs(c.astype(int) - g.astype(int))
        assert diff.max() <= 2 and (diff == 0).mean() > 0.9  # warps and colour math round differently


@pytest.mark.parametrize("name", ["auto_augment", "rand_augment", "trivial_augment"])
def test_videos_every_frame_of_a_clip_gets_the_same_operations(name):
    clips = [np.stack([img] * 3) for img in IMAGES[:6]]  # FHWC clips of three equal frames

    @sluice.pipeline_def(enable_conditionals=True, batch_size=6, num_threads=2, device_id=None, seed=3)
    def pipe():
        x = fn.external_source(source=lambda: clips, layout="FHWC")
        policy = POLICIES[name]
        return auto_augment.auto_augment_image_net(x) if name == "auto_augment" else \
            policy(x, fn.shapes(x)) if policy.__code__.co_argcount == 2 else policy(x)

    (out,) = pipe().run()
    assert out.layout() == "FHWC"
    for i, clip in enumerate(clips):
        got = out.at(i)
        assert got.shape == clip.shape
        np.testing.assert_array_equal(got[0], got[1])
        np.testing.assert_array_equal(got[0], got[2])
