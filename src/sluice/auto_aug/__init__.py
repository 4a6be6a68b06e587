"""Automatic augmentations (DALI's ``nvidia.dali.auto_aug``): AutoAugment, RandAugment and TrivialAugment Wide,
their suite of augmentations and the pieces to write custom ones.

* :mod:`~sluice.auto_aug.auto_augment`: ``auto_augment`` / ``auto_augment_image_net`` (the paper's policies),
  ``apply_auto_augment`` (a custom :class:`~sluice.auto_aug.core.Policy`);
* :mod:`~sluice.auto_aug.rand_augment`: ``rand_augment`` / ``apply_rand_augment``;
* :mod:`~sluice.auto_aug.trivial_augment`: ``trivial_augment_wide`` / ``apply_trivial_augment``;
* :mod:`~sluice.auto_aug.augmentations`: the augmentations (shears, translations, rotate, brightness,
  contrast, color, sharpness, posterize, solarize, solarize_add, invert, equalize, auto_contrast, identity);
* :mod:`~sluice.auto_aug.core`: ``@augmentation``, ``Policy``, ``select``, ``signed_bin``.

The augmentation of each sample is chosen with ``if`` statements on DataNodes, so the pipeline is defined with
``enable_conditionals=True``; each augmentation then runs once per batch on the samples that chose it. The same
seed gives the same images.

Example::

    from sluice import fn, pipeline_def, types
    from sluice.auto_aug import trivial_augment

    @pipeline_def(enable_conditionals=True, batch_size=128, num_threads=4, device_id=0, seed=1)
    def pipe(files):
        jpegs, labels = fn.readers.file(files=files)
        images = fn.decoders.image(jpegs, device="mixed")
        images = fn.resize(images, size=[224, 224])
        return trivial_augment.trivial_augment_wide(images), labels
"""

from sluice.auto_aug import augmentations, auto_augment, core, rand_augment, trivial_augment

__all__ = ["augmentations", "auto_augment", "core", "rand_augment", "trivial_augment"]
