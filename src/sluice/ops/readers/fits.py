"""``fn.experimental.readers.fits``: image HDUs of FITS files, as DALI's reader, with a small FITS reader of its own
(no astropy or cfitsio).

A FITS file is a run of HDUs, each a header of 80-character cards in 2880-byte blocks (ending with ``END``) and
its data padded to 2880 bytes. The reader takes the HDUs ``hdu_indices`` (1-based: 1 is the primary HDU; DALI's
default ``[2]``, the first extension) of each file, which must be image HDUs (the primary, or ``XTENSION=
'IMAGE'``) with BITPIX 8, 16, 32, 64, -32 or -64. The array comes out in C order (``NAXISn x ... x NAXIS1``), in
the native byte order. ``BZERO`` / ``BSCALE`` follow cfitsio's equivalent types: the unsigned conventions
(``BZERO`` 2**15, 2**31, 2**63 over signed integers, -128 over bytes) give uint16, uint32, uint64 and int8; other
scalings give float32 (float64 for 64-bit data). Tile-compressed images (``ZIMAGE`` binary tables) are not read:
they raise naming the file and the HDU. ``dtypes`` (one per output) checks the types.

Headers are parsed once per file and kept; a batch's data are read as byte ranges into one buffer and converted
in the pipeline's threads. ``device="gpu"`` reads in the CPU stage and copies each output to the GPU once.
Sharding, shuffling, padding and checkpoints are ``readers.file``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sluice import types
from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.ops.readers._base import read_packed
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.ops.readers.numpy import list_npy, listing_args
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema, OpSpec

__all__ = ["SCHEMA", "FitsError", "FitsImage", "parse_hdus"]

BLOCK = 2880
_BITPIX = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
_UNSIGNED = {(16, 2.0 ** 15): np.uint16, (32, 2.0 ** 31): np.uint32, (64, 2.0 ** 63): np.uint64, (8, -128.0): np.int8}

SCHEMA = OpSchema(
    "experimental.readers.fits",
    doc="""Reads image HDUs of FITS files: one output per entry of ``hdu_indices`` (1-based; default the first
    extension, ``[2]``).

    Example::

        images = fn.experimental.readers.fits(file_root="/data/sky", hdu_indices=[2], random_shuffle=True)
    """,
    inputs=0,
    outputs=lambda a: len(a.get("hdu_indices") or [2]),
    devices=("cpu", "gpu"),
    stateful=True,
    output_layout="",
    args=[
        *listing_args("*.fits"),
        Arg("hdu_indices", "int_list", [2], "The HDUs to read, 1-based (1: the primary HDU).", min=1),
        Arg("dtypes", "str_list", None, "Expected type of each output (DALI type names such as 'FLOAT', 'INT16'); "
            "a file whose HDU differs is an error."),
        Arg("use_o_direct", bool, False, "Accepted for DALI compatibility."),
        *READER_ARGS,
    ],
)


class FitsError(ValueError):
    """A FITS file or HDU that cannot be read as an image (the message names it)."""


@dataclass(frozen=True)
class FitsImage:
    """Where an image HDU's data lie and how to read them."""

    offset: int
    shape: tuple[int, ...]
    stored: np.dtype
    out: np.dtype
    bzero: float
    bscale: float

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.stored.itemsize


def _cards(header: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for k in range(0, len(header), 80):
        card = header[k:k + 80].decode("ascii", "replace")
        name = card[:8].strip()
        if card[8:10] == "= " and name not in out:
            value = card[10:]
            if value.lstrip().startswith("'"):
                value = value.split("'")[1] if value.count("'") >= 2 else value
            else:
                value = value.split("/")[0]
            out[name] = value.strip()
    return out


def _image(cards: dict[str, str], offset: int, where: str) -> tuple[FitsImage | None, int]:
    """The image of an HDU (None when it is not an image HDU) and the size of its data area."""
    try:
        bitpix = int(cards["BITPIX"])
        naxis = int(cards["NAXIS"])
        axes = [int(cards[f"NAXIS{i}"]) for i in range(1, naxis + 1)]
        pcount = int(cards.get("PCOUNT", 0))
        gcount = int(cards.get("GCOUNT", 1))
    except (KeyError, ValueError) as e:
        raise FitsError(f"{where}: the header lacks or garbles {e}") from None
    if bitpix not in _BITPIX:
        raise FitsError(f"{where}: BITPIX {bitpix} is not a FITS data type")
    size = abs(bitpix) // 8 * gcount * (pcount + (int(np.prod(axes, dtype=np.int64)) if axes else 0))
    xtension = cards.get("XTENSION", "").strip().upper()
    is_image = "SIMPLE" in cards or xtension == "IMAGE"
    if not is_image:
        if cards.get("ZIMAGE", "").upper() == "T":
            raise FitsError(f"{where} is a tile-compressed image; sluice reads uncompressed image HDUs only")
        return None, size
    stored = np.dtype(_BITPIX[bitpix])
    bzero = float(cards.get("BZERO", 0.0))
    bscale = float(cards.get("BSCALE", 1.0))
    if bscale == 1.0 and (bitpix, bzero) in _UNSIGNED:
        out = np.dtype(_UNSIGNED[(bitpix, bzero)])
    elif bzero == 0.0 and bscale == 1.0:
        out = stored.newbyteorder("=")
    else:
        out = np.dtype(np.float64 if abs(bitpix) == 64 else np.float32)
    return FitsImage(offset, tuple(axes[::-1]), stored, out, bzero, bscale), size


def parse_hdus(f, path: str, wanted: int) -> list[FitsImage | None]:
    """The first ``wanted`` HDUs of the open file ``f`` (an image, or None for other HDUs)."""
    hdus: list[FitsImage | None] = []
    pos = 0
    while len(hdus) < wanted:
        header = b""
        while True:
            block = f.read(BLOCK)
            if len(block) < BLOCK:
                if not header and hdus:
                    return hdus
                raise FitsError(f"'{path}': the file ends inside the header of HDU {len(hdus) + 1}")
            header += block
            pos += BLOCK
            if not hdus and not header.startswith(b"SIMPLE  "):
                raise FitsError(f"'{path}' is not a FITS file (it does not start with SIMPLE)")
            if any(header[k:k + 8] == b"END     " for k in range(len(header) - BLOCK, len(header), 80)):
                break
        image, size = _image(_cards(header), pos, f"'{path}' HDU {len(hdus) + 1}")
        hdus.append(image)
        skip = size + (-size % BLOCK)
        f.seek(skip, 1)
        pos += skip
    return hdus


@SCHEMA.operator_class("cpu")
class FitsReader(ReaderBase):
    op_name = "fn.experimental.readers.fits"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        self.paths = list_npy(self.op_name, a, self.s3)
        if not self.paths:
            raise ArgumentError(f"{self.op_name}: no files found (file_filter={a['file_filter']!r})")
        self.hdus = [int(h) for h in (a["hdu_indices"] or [2])]
        self.dtypes = None
        if a["dtypes"] is not None:
            if len(a["dtypes"]) != len(self.hdus):
                raise ArgumentError(f"{self.op_name}: {len(a['dtypes'])} dtypes for {len(self.hdus)} hdu_indices")
            self.dtypes = [types.to_torch_dtype(types.DALIDataType[t.upper()] if isinstance(t, str) else t)
                           for t in a["dtypes"]]
        self.images: dict[int, list[FitsImage]] = {}
        self.setup_order(len(self.paths))

    def _images(self, i: int, k: int) -> list[FitsImage]:
        found = self.images.get(i)
        if found is None:
            path = self.paths[i]
            try:
                with storage.open_file(path, buffer_size=BLOCK * 4, clients=self.s3) as f:
                    hdus = parse_hdus(f, path, max(self.hdus))
            except (storage.StorageError, OSError, FitsError) as e:
                raise SampleError(k, path, e) from None
            found = []
            for h in self.hdus:
                if h > len(hdus):
                    raise SampleError(k, path, FitsError(f"'{path}' has {len(hdus)} HDUs; hdu_indices asks for {h}"))
                if hdus[h - 1] is None:
                    raise SampleError(k, path, FitsError(f"'{path}' HDU {h} is not an image HDU"))
                found.append(hdus[h - 1])
            self.images[i] = found
        return found

    def read_batch(self, ctx: BatchContext, pin: bool) -> list[tuple[torch.Tensor, np.ndarray, list[str]]]:
        picks = [i for i, _ in self.next_samples(ctx)]
        names = [self.paths[i] for i in picks]
        images = [self._images(i, k) for k, i in enumerate(picks)]
        outs = []
        for h in range(len(self.hdus)):
            imgs = [im[h] for im in images]
            kinds = {im.out for im in imgs}
            if len(kinds) > 1:
                raise SampleError(0, names[0], FitsError(f"HDU {self.hdus[h]} holds different types in one batch "
                                                         f"({sorted(map(str, kinds))})"))
            out_type = imgs[0].out
            torch_type = torch.from_numpy(np.empty(0, out_type)).dtype
            if self.dtypes is not None and self.dtypes[h] != torch_type:
                raise SampleError(0, names[0], FitsError(f"HDU {self.hdus[h]} holds {torch_type}, not the "
                                                         f"{self.dtypes[h]} dtypes asks for"))
            buf, offs, sizes = read_packed(self.op_name, names, np.array([im.offset for im in imgs], np.int64),
                                           np.array([im.nbytes for im in imgs], np.int64), names,
                                           pool=ctx.thread_pool, what="image data", clients=self.s3)
            host = buf.numpy()
            if len({len(im.shape) for im in imgs}) > 1:
                raise SampleError(0, names[0], FitsError(f"HDU {self.hdus[h]} has different numbers of axes in one "
                                                         "batch; the images of an output must share their rank"))
            shapes = np.array([im.shape for im in imgs], np.int64).reshape(len(imgs), -1)
            counts = np.prod(shapes, axis=1, dtype=np.int64) if shapes.shape[1] else np.ones(len(imgs), np.int64)
            flat = torch.empty(int(counts.sum()), dtype=torch_type, pin_memory=pin and torch.cuda.is_available())
            dst = flat.numpy()
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)

            def convert(k: int, im_list=imgs) -> None:
                im = im_list[k]
                raw = host[offs[k]:offs[k] + sizes[k]].view(im.stored)
                part = dst[starts[k]:starts[k] + counts[k]]
                if im.out.kind == "f" and (im.bzero != 0.0 or im.bscale != 1.0):
                    part[:] = raw * im.bscale + im.bzero
                elif im.out != im.stored.newbyteorder("="):  # the unsigned conventions: flip the sign bit
                    bits = raw.astype(raw.dtype.newbyteorder("=")).view(im.out)
                    part[:] = bits ^ np.array(1 << (im.out.itemsize * 8 - 1), np.uint64).astype(im.out) \
                        if im.out.kind == "u" else raw.astype(np.int16) - 128
                else:
                    part[:] = raw

            map_all(ctx.thread_pool, convert, list(range(len(imgs))))
            outs.append((flat, shapes, names))
        return outs

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        return tuple(Batch.from_packed(f, s, "", n) for f, s, n in self.read_batch(ctx, self.pin_outputs))


@SCHEMA.operator_class("gpu")
class FitsReaderGpu(FitsReader):
    """``device="gpu"``: read in the CPU stage (``prepare``) into page-locked buffers, one copy per output."""

    def prepare(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs):
        return self.read_batch(ctx, True)

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        parts = ctx.prepared if ctx.prepared is not None else self.prepare(ctx, args=args)
        return tuple(Batch.from_packed(f.to(ctx.device, non_blocking=True), s, "", n) for f, s, n in parts)
