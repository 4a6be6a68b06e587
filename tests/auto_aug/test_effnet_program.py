"""benchmarks/effnet_side_by_side.py's program (DALI's EfficientNet training pipeline with auto_augment or
trivial_augment_wide) runs on the CPU, through sluice's names and DALI's: readers.file -> image_random_crop ->
resize -> flip -> the policy -> crop_mirror_normalize."""

import importlib.util
import os

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks",
                      "effnet_side_by_side.py")


def _program():
    spec = importlib.util.spec_from_file_location("effnet_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("policy,base", [("autoaug", "sluice"), ("trivial", "sluice.compat.dali")])
def test_program_runs_on_the_cpu(tmp_path, policy, base):
    rng = np.random.default_rng(0)
    for i in range(4):
        folder = tmp_path / f"class{i % 2}"
        folder.mkdir(exist_ok=True)
        cv2.imwrite(str(folder / f"{i}.jpg"), rng.integers(0, 256, (120 + 10 * i, 160, 3), dtype=np.uint8))
    pipe = _program().build(base, str(tmp_path), policy, batch_size=4, num_threads=2, device="cpu")()
    images, labels = pipe.run()
    pipe.close()
    assert images.as_tensor().shape == (4, 3, 224, 224) and str(images.dtype) == "torch.float32"
    assert sorted(labels.as_tensor().reshape(-1).tolist()) == [0, 0, 1, 1]
