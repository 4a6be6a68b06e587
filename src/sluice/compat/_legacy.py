"""DALI's old operator names and arguments, translated onto sluice's operators.

Three tables drive the whole compatibility layer:

* :data:`ARG_RULES` -- per operator, DALI arguments that sluice spells differently (``output_dtype`` ->
  ``dtype``), that DALI itself deprecated and ignores (``image_type`` of ``crop_mirror_normalize``), that only
  tune DALI's internals (decoder caches), or that sluice supports for some values only (``readers.video``'s
  ``image_type=types.RGB``);
* :data:`FN_ALIASES` and :data:`OPS_ALIASES` -- deprecated operator names (``fn.file_reader``,
  ``ops.nvJPEGDecoder``) and the sluice operators they stand for.

:func:`make_function` and :func:`make_class` wrap sluice's ``fn.x`` / ``ops.X`` with these rules. A deprecated
name or argument works with a ``DeprecationWarning`` naming its replacement; a DALI argument or value sluice does
not implement raises :class:`~sluice.compat._missing.NotSupportedError` naming the operator and the argument.

Example::

    decode = make_class(get_schema("decoders.image"), "nvJPEGDecoder", legacy=True, default_device="mixed")
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sluice.fn
import sluice.ops
from sluice import types
from sluice.compat._missing import NotSupportedError
from sluice.errors import ArgumentError
from sluice.pipeline.graph import DataNode
from sluice.schema import OpSchema, _camel

log = logging.getLogger(__name__)

__all__ = [
    "ARG_RULES",
    "FN_ALIASES",
    "FN_OTHER_NAMES",
    "OPS_ALIASES",
    "OPS_OTHER_NAMES",
    "Dropped",
    "OnlyValues",
    "Renamed",
    "class_path",
    "make_class",
    "make_function",
    "translate",
]


@dataclass(frozen=True)
class Renamed:
    """A deprecated spelling of another argument."""

    new: str


@dataclass(frozen=True)
class Dropped:
    """Accepted and dropped: DALI deprecated it and ignores it (``deprecated``), or it only tunes DALI's internals
    and cannot change a result."""

    why: str
    deprecated: bool = True


@dataclass(frozen=True)
class OnlyValues:
    """Accepted (and dropped) with these values, which are what sluice does anyway; any other value raises."""

    values: tuple[Any, ...]
    why: str


_NO_EFFECT = "it has no effect"
_DECODER_RULES: dict[str, Any] = {
    "split_stages": Dropped(_NO_EFFECT),
    "use_chunk_allocator": Dropped(_NO_EFFECT),
    "memory_stats": Dropped("sluice does not collect nvJPEG memory statistics", deprecated=False),
    **{name: Dropped("sluice keeps no decoded-image cache (results are the same)", deprecated=False)
       for name in ("cache_size", "cache_threshold", "cache_type", "cache_debug", "cache_batch_copy")},
}
_VIDEO_RULES: dict[str, Any] = {
    "image_type": OnlyValues((types.RGB,), "sluice decodes video frames to RGB only"),
    "channels": OnlyValues((3,), "sluice decodes video frames to 3 channels (RGB) only"),
}
_VIDEO_DECODER_RULES: dict[str, Any] = {
    # dali/operators/video/decoder/video_decoder_cpu.cc: build_index (default True) makes DALI scan the file for a
    # frame index to seek with; sluice always locates frames through its exact packet index (cached on disk)
    "build_index": Dropped("sluice always seeks through its exact per-file packet index", deprecated=False),
    "affine": Dropped("it pins DALI's own decoding threads to cores; sluice's threads are the pipeline's",
                      deprecated=False),
}
_CROP_RULES: dict[str, Any] = {
    "output_dtype": Renamed("dtype"),
    "image_type": Dropped(_NO_EFFECT),
}

ARG_RULES: dict[str, dict[str, Any]] = {
    "crop_mirror_normalize": _CROP_RULES,
    "crop": _CROP_RULES,
    "resize": {
        "image_type": Dropped(_NO_EFFECT),
    },
    "decoders.image": _DECODER_RULES,
    "decoders.image_crop": _DECODER_RULES,
    "decoders.image_random_crop": _DECODER_RULES,
    "decoders.image_slice": _DECODER_RULES,
    "decoders.video": _VIDEO_DECODER_RULES,
    "readers.video": _VIDEO_RULES,
    "readers.video_resize": _VIDEO_RULES,
    "readers.coco": {  # dali/operators/reader/coco_reader_op.cc: DeprecateArgInFavorOf, since DALI 0.28
        "meta_files_path": Renamed("preprocessed_annotations"),
        "dump_meta_files": Renamed("save_preprocessed_annotations"),
        "dump_meta_files_path": Renamed("save_preprocessed_annotations_dir"),
        "save_img_ids": Renamed("image_ids"),
    },
    "cast": {"output_dtype": Renamed("dtype")},
    "color_space_conversion": {"output_dtype": Renamed("dtype")},
}

# DALI name -> (sluice operator, device it defaults to or None)
FN_ALIASES: dict[str, tuple[str, str | None]] = {
    "audio_decoder": ("decoders.audio", None),
    "file_reader": ("readers.file", None),
    "tfrecord_reader": ("readers.tfrecord", None),
    "numpy_reader": ("readers.numpy", None),
    "coco_reader": ("readers.coco", None),
    "nemo_asr_reader": ("readers.nemo_asr", None),
    "image_decoder": ("decoders.image", None),
    "image_decoder_crop": ("decoders.image_crop", None),
    "image_decoder_random_crop": ("decoders.image_random_crop", None),
    "image_decoder_slice": ("decoders.image_slice", None),
    "sequence_reader": ("readers.sequence", None),
    "video_reader": ("readers.video", None),
    "video_reader_resize": ("readers.video_resize", None),
    "coin_flip": ("random.coin_flip", None),
    "uniform": ("random.uniform", None),
    "normal_distribution": ("random.normal", None),
    "experimental.audio_resample": ("audio_resample", None),
    "experimental.decoders.image": ("decoders.image", None),
    "experimental.decoders.image_crop": ("decoders.image_crop", None),
    "experimental.decoders.image_random_crop": ("decoders.image_random_crop", None),
    "experimental.decoders.image_slice": ("decoders.image_slice", None),
}

OPS_ALIASES: dict[str, tuple[str, str | None]] = {
    "AudioDecoder": ("decoders.audio", None),
    "FileReader": ("readers.file", None),
    "TFRecordReader": ("readers.tfrecord", None),
    "NumpyReader": ("readers.numpy", None),
    "COCOReader": ("readers.coco", None),
    "NemoAsrReader": ("readers.nemo_asr", None),
    "ImageDecoder": ("decoders.image", None),
    "ImageDecoderCrop": ("decoders.image_crop", None),
    "ImageDecoderRandomCrop": ("decoders.image_random_crop", None),
    "ImageDecoderSlice": ("decoders.image_slice", None),
    "nvJPEGDecoder": ("decoders.image", "mixed"),
    "nvJPEGDecoderCrop": ("decoders.image_crop", "mixed"),
    "nvJPEGDecoderRandomCrop": ("decoders.image_random_crop", "mixed"),
    "nvJPEGDecoderSlice": ("decoders.image_slice", "mixed"),
    "HostDecoder": ("decoders.image", "cpu"),
    "HostDecoderCrop": ("decoders.image_crop", "cpu"),
    "HostDecoderRandomCrop": ("decoders.image_random_crop", "cpu"),
    "HostDecoderSlice": ("decoders.image_slice", "cpu"),
    "SequenceReader": ("readers.sequence", None),
    "VideoReader": ("readers.video", None),
    "VideoReaderResize": ("readers.video_resize", None),
    "CoinFlip": ("random.coin_flip", None),
    "Uniform": ("random.uniform", None),
    "NormalDistribution": ("random.normal", None),
    "experimental.AudioResample": ("audio_resample", None),
    "experimental.decoders.Image": ("decoders.image", None),
    "experimental.decoders.ImageCrop": ("decoders.image_crop", None),
    "experimental.decoders.ImageRandomCrop": ("decoders.image_random_crop", None),
    "experimental.decoders.ImageSlice": ("decoders.image_slice", None),
}


# DALI class names that are not the CamelCase of the function name
# DALI names, current (not deprecated), that differ from sluice's: DALI name -> sluice operator
FN_OTHER_NAMES: dict[str, str] = {"experimental.decoders.video": "decoders.video",
                                  "experimental.peek_image_shape": "peek_image_shape",
                                  "experimental.equalize": "equalize", "experimental.filter": "filter",
                                  # DALI's CV-CUDA resize takes resize's arguments and gives its results
                                  "experimental.resize": "resize"}
OPS_OTHER_NAMES: dict[str, str] = {"experimental.decoders.Video": "decoders.video",
                                   "experimental.PeekImageShape": "peek_image_shape",
                                   "experimental.Equalize": "equalize", "experimental.Filter": "filter",
                                   "experimental.Resize": "resize"}


def class_path(op_name: str) -> str:
    """``decoders.image`` -> ``decoders.Image`` (where DALI's ``ops`` keeps the class); ``mfcc`` -> ``MFCC``."""
    *path, _ = op_name.split(".")
    return ".".join([*path, _camel(op_name)])


def _same_value(value: Any, allowed: Sequence[Any]) -> bool:
    for a in allowed:
        try:
            equal = value is a or bool(value == a)
        except (TypeError, ValueError):  # arrays and such never match
            equal = False
        if equal:
            return True
    return False


def translate(schema: OpSchema, where: str, kwargs: dict[str, Any], stacklevel: int = 3,
              defaults: bool = True) -> dict[str, Any]:
    """DALI-spelled arguments of ``where`` (``fn.crop_mirror_normalize``) -> the arguments sluice's operator takes.

    Warns (DeprecationWarning) for deprecated spellings, drops what cannot change a result, and raises
    NotSupportedError for a DALI argument or value sluice does not implement. ``defaults``: also fill in DALI's
    defaults where sluice's differ (not for the arguments of an ``ops`` call, which add to the constructor's)."""
    rules = ARG_RULES.get(schema.name, {})
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        rule = rules.get(key)
        if key in ("device", "name"):
            out[key] = value
        elif rule is None and key in schema.args:
            # DALI takes Python bools for integer arguments (mirror=False in its ImageNet example)
            out[key] = int(value) if isinstance(value, bool) and schema.args[key].type is int else value
        elif isinstance(rule, Renamed):
            if rule.new in kwargs:
                raise ArgumentError(f"{where}: give '{rule.new}' or its deprecated spelling '{key}', not both")
            warnings.warn(f"{where}: argument '{key}' is deprecated; use '{rule.new}'", DeprecationWarning,
                          stacklevel=stacklevel)
            out[rule.new] = value
        elif isinstance(rule, Dropped):
            if rule.deprecated:
                warnings.warn(f"{where}: argument '{key}' is deprecated and ignored ({rule.why})",
                              DeprecationWarning, stacklevel=stacklevel)
            else:
                log.debug("%s: argument '%s' ignored: %s", where, key, rule.why)
        elif isinstance(rule, OnlyValues):
            if isinstance(value, DataNode) or not _same_value(value, rule.values):
                raise NotSupportedError(f"{where}: {key}={value!r} is not supported by sluice ({rule.why}); "
                                        f"supported: {', '.join(repr(v) for v in rule.values)}")
        elif key == "seed":
            pass  # DALI takes a seed on every operator; a deterministic one ignores it, as here
        else:
            raise NotSupportedError(f"{where}: argument '{key}' is not supported by sluice (is it a DALI "
                                    f"argument?). Arguments of this operator: "
                                    f"{', '.join(sorted(set(schema.args) | {'device', 'name'}))}.")
    if defaults and "shard_id" in schema.args and "num_shards" in schema.args:
        # DALI's readers read the whole data set unless told otherwise; sluice's shard by torch.distributed's
        # rank when it is initialised. A DALI program gets DALI's defaults.
        out.setdefault("shard_id", 0)
        out.setdefault("num_shards", 1)
    if schema.name in _VIDEO_READERS and out.get("labels") is not None and len(out["labels"]) == 0:
        # DALI: an empty list of labels numbers the files 0, 1, 2, ...
        out["labels"] = list(range(len(out.get("filenames") or [])))
    return out


_VIDEO_READERS = ("readers.video", "readers.video_resize")


def finish(schema: OpSchema, args: dict[str, Any], outputs: Any) -> Any:
    """Outputs as DALI returns them. DALI's video readers yield no labels for ``filenames`` without ``labels``
    (sluice's always do): that output is dropped here."""
    if (schema.name in _VIDEO_READERS and args.get("filenames") and args.get("labels") is None
            and not args.get("file_root") and not args.get("file_list")):
        rest = [o for i, o in enumerate(outputs) if i != 1]
        return rest[0] if len(rest) == 1 else rest
    return outputs


def _sluice_attr(root: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def make_function(schema: OpSchema, dali_name: str, *, legacy: bool = False,
                  default_device: str | None = None) -> Callable[..., Any]:
    """``nvidia.dali.fn.<dali_name>``: sluice's ``fn.<schema.name>`` behind the argument rules."""
    base = _sluice_attr(sluice.fn, schema.name)
    where = f"fn.{dali_name}"
    message = f"fn.{dali_name} is deprecated; use fn.{schema.name}" + (
        f"(device='{default_device}')" if default_device else "")

    def operator(*inputs: Any, **kwargs: Any) -> Any:
        if legacy:
            warnings.warn(message, DeprecationWarning, stacklevel=2)
        if default_device is not None:
            kwargs.setdefault("device", default_device)
        args = translate(schema, where, kwargs)
        return finish(schema, args, base(*inputs, **args))

    namespace, _, operator.__name__ = ("." + dali_name).rpartition(".")
    operator.__qualname__ = operator.__name__
    operator.__doc__ = (f"Deprecated DALI alias of fn.{schema.name}.\n\n" if legacy else "") + (base.__doc__ or "")
    operator.__signature__ = base.__signature__  # type: ignore[attr-defined]
    operator.__module__ = "sluice.compat.dali.fn" + namespace  # where pickle finds it
    return operator


def make_class(schema: OpSchema, dali_name: str, *, legacy: bool = False, default_device: str | None = None) -> type:
    """``nvidia.dali.ops.<dali_name>``: a subclass of sluice's ``ops`` class behind the argument rules."""
    *path, _ = schema.name.split(".")
    base = _sluice_attr(sluice.ops, ".".join([*path, _camel(schema.name)]))
    where = f"ops.{dali_name}"
    message = f"ops.{dali_name} is deprecated; use ops.{class_path(schema.name)}" + (
        f"(device='{default_device}')" if default_device else "")

    def __init__(self: Any, *, device: str | None = None, **kwargs: Any) -> None:
        if legacy:
            warnings.warn(message, DeprecationWarning, stacklevel=2)
        base.__init__(self, device=device if device is not None else default_device,
                      **translate(schema, where, kwargs))

    def __call__(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        args = translate(schema, where, kwargs, defaults=False)
        merged = dict(self._kwargs)
        merged.update(args)
        return finish(schema, merged, base.__call__(self, *inputs, **args))

    namespace, _, leaf = ("." + dali_name).rpartition(".")
    return type(leaf, (base,), {"__init__": __init__, "__call__": __call__,
                                "__module__": "sluice.compat.dali.ops" + namespace, "__qualname__": leaf,
                                "__doc__": (f"Deprecated DALI alias of ops.{class_path(schema.name)}.\n\n"
                                            if legacy else "") + (base.__doc__ or "")})
