"""The ``sluice`` command: ``sluice demo``, ``sluice bench``, ``sluice probe VIDEO``, ``sluice index PATH...``,
``sluice tfrecord-index FILE [INDEX]``.

Arguments are checked by argparse: a bad value is one line on stderr and exit status 2. A missing optional package
is one line naming the extra that brings it, and exit status 1. ``-v`` / ``-q`` (before or after the command) set
the log level. Example::

    $ sluice demo --cpu --images 64 --epochs 1
    $ sluice -v bench --iterations 10
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import sluice
from sluice._cache import cache_dir
from sluice._optional import MissingDependencyError, check, from_import_error
from sluice.backends import storage
from sluice.backends.tfrecord import build_index
from sluice.bench import MEAN, STD, demo_pipeline, make_demo_images  # noqa: F401 - sluice.cli's names
from sluice.bench import main as bench_main
from sluice.video_cli import add_subcommands, at_least

log = logging.getLogger(__name__)

#: What the demo and the bench need beyond numpy and torch: Pillow to write JPEGs and the contact sheet, the CPU
#: image codecs to decode them (all in the image extra).
DEMO_NEEDS = ("PIL", "simplejpeg", "cv2")


def _progress(iterable: Any, total: int, desc: str, enabled: bool = True) -> Any:
    if not enabled:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is in the cli extra; work without it
        return iterable
    return tqdm(iterable, total=total, desc=desc, unit="batch", file=sys.stdout)


def contact_sheet(images: Any, path: Path, columns: int = 8) -> Path:
    """Save a grid of normalised CHW images (undoing the normalisation) as a PNG."""
    import torch
    from PIL import Image

    x = images.float().cpu()
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    x = (x * std + mean).clamp(0, 255).to(torch.uint8)
    n, _, h, w = x.shape
    rows = -(-n // columns)
    sheet = torch.zeros(3, rows * (h + 4), min(n, columns) * (w + 4), dtype=torch.uint8)
    for i in range(n):
        r, c = divmod(i, columns)
        sheet[:, r * (h + 4):r * (h + 4) + h, c * (w + 4):c * (w + 4) + w] = x[i]
    Image.fromarray(sheet.permute(1, 2, 0).numpy()).save(path)
    return path


def cmd_demo(args: argparse.Namespace) -> int:
    import torch

    from sluice.torch import DALIClassificationIterator, LastBatchPolicy  # import time: only the demo needs it

    root = cache_dir("demo_images")
    log.info("demo images: %s", root)
    files, labels = make_demo_images(root, count=args.images)
    device_id = None if args.cpu or not torch.cuda.is_available() else 0
    where = f"GPU {torch.cuda.get_device_name(0)}" if device_id is not None else f"CPU ({os.cpu_count()} cores)"
    print(f"sluice {sluice.__version__} demo: {len(files)} JPEGs in {root}")
    print(f"pipeline: readers.file -> decoders.image_random_crop({'mixed' if device_id is not None else 'cpu'}) -> "
          f"resize 224 -> crop_mirror_normalize(FLOAT16, CHW, mirror=coin_flip) on {where}")
    pipe = demo_pipeline(str(root), files, labels, args.batch_size, device_id)
    loader = DALIClassificationIterator(pipe, reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL,
                                        auto_reset=True)
    first = None
    images_seen = 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for batch in _progress(loader, len(loader), f"epoch {epoch + 1}/{args.epochs}", not args.quiet_progress):
            data = batch[0]["data"]
            if first is None:
                first = (data, batch[0]["label"])
                start = time.perf_counter()  # time the steady state, after the first batch
            else:
                images_seen += data.shape[0]
        log.info("epoch %d: %d batches", epoch + 1, len(loader))
    if device_id is not None:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    pipe.close()
    if first is None:  # cannot happen with --images >= 1 and --epochs >= 1 (argparse checks both)
        raise sluice.SluiceError("the demo pipeline gave no batch")
    out = Path(args.output)
    contact_sheet(first[0][:32], out)
    print(f"batch: {tuple(first[0].shape)} {first[0].dtype} on {first[0].device}, "
          f"labels {first[1][:8].flatten().tolist()}")
    if images_seen:
        print(f"throughput: {images_seen / seconds:,.0f} images/s ({images_seen} images in {seconds:.2f} s)")
    print(f"contact sheet of the first augmented batch: {out.resolve()}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    return bench_main(args)


# ------------------------------------------------------------------------------------------------------------
# The parser
# ------------------------------------------------------------------------------------------------------------
class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help; -v / -q say theirs in words."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if isinstance(action, argparse._CountAction):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse with every option's default in its help, and errors on one line (exit status 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def cmd_tfrecord_index(args: argparse.Namespace) -> int:
    """Write the index of a TFRecord file (DALI's tfrecord2idx format) for ``fn.readers.tfrecord(index_path=)``."""
    index = args.index or storage.basename(args.tfrecord) + ".idx"
    with storage.S3Clients() as clients, storage.open_file(args.tfrecord, buffer_size=8 << 20, clients=clients) as f:
        text = build_index(f, args.tfrecord, storage.size(args.tfrecord, clients=clients))
    Path(index).write_text(text)
    print(f"indexed {text.count(chr(10))} records of {args.tfrecord} into {index}")
    return 0


def _check_bench(args: argparse.Namespace) -> str | None:
    if args.images < args.batch_size:
        return f"--images ({args.images}) must be at least --batch-size ({args.batch_size}): the DataLoader peer " \
               "drops partial batches"
    return None


def _verbosity(parser: argparse.ArgumentParser, top: bool) -> None:
    # At the top level they default to 0; on a command they are added to what was given before it.
    default = 0 if top else argparse.SUPPRESS
    group = parser.add_argument_group("logging")
    group.add_argument("-v", "--verbose", action="count", default=default,
                       help="log more: -v what sluice does (INFO), -vv everything (DEBUG); by default only "
                            "warnings and errors")
    group.add_argument("-q", "--quiet", action="count", default=default,
                       help="log errors only and show no progress bars (default: off)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sluice", description="GPU data loading for PyTorch with DALI's operators.")
    parser.add_argument("--version", action="version", version=f"sluice {sluice.__version__}")
    _verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = sub.choices  # type: ignore[attr-defined]  # main() reports a command's errors with its parser

    demo = sub.add_parser("demo", help="run the image training pipeline on JPEGs it makes itself",
                          description="Make demo JPEGs in sluice's cache ($SLUICE_CACHE, default ~/.cache/sluice), "
                                      "run the training pipeline over them with the PyTorch iterator, print its "
                                      "throughput and save a contact sheet of the first augmented batch.")
    demo.add_argument("--images", type=at_least(1), default=320, help="how many demo JPEGs to make and train on")
    demo.add_argument("--batch-size", type=at_least(1), default=32, help="images per batch")
    demo.add_argument("--epochs", type=at_least(1), default=2, help="passes over the images")
    demo.add_argument("--cpu", action="store_true", help="stay on the CPU even if a GPU exists")
    demo.add_argument("--output", default="sluice_demo.png", help="where the contact sheet (PNG) goes")
    demo.set_defaults(func=cmd_demo, needs=DEMO_NEEDS)
    _verbosity(demo, top=False)

    bench = sub.add_parser("bench", help="measure sluice against the PyTorch DataLoader on this machine",
                           description="Engine overhead per iteration against a plain PyTorch loop, and the demo's "
                                       "image training pipeline against the DataLoader with Pillow, printed as "
                                       "ratios. The full benchmarks are the scripts under benchmarks/.")
    bench.add_argument("--images", type=at_least(1), default=320, help="how many demo JPEGs to read")
    bench.add_argument("--batch-size", type=at_least(1), default=32, help="images per batch")
    bench.add_argument("--iterations", type=at_least(1), default=20,
                       help="timed batches of each image pipeline (the engine overhead times max(200, 20 x this) "
                            "iterations)")
    bench.set_defaults(func=cmd_bench, needs=DEMO_NEEDS, validate=_check_bench)
    _verbosity(bench, top=False)
    tfr = sub.add_parser("tfrecord-index", help="index a TFRecord file for fn.readers.tfrecord (as DALI's "
                         "tfrecord2idx)")
    tfr.add_argument("tfrecord", help="the TFRecord file (a path or an s3:// URL)")
    tfr.add_argument("index", nargs="?", help="the index to write (default: the file's name + .idx, here)")
    tfr.set_defaults(func=cmd_tfrecord_index)
    _verbosity(tfr, top=False)

    add_subcommands(sub)  # `sluice probe VIDEO`, `sluice index PATH...`
    for name in ("probe", "index"):
        sub.choices[name].set_defaults(needs=("av",))
        _verbosity(sub.choices[name], top=False)
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(
        max(-1, min(2, args.verbose - args.quiet)), logging.DEBUG)
    logging.basicConfig(level=level, format="%(name)s: %(message)s")
    logging.getLogger("sluice").setLevel(level)
    args.quiet_progress = args.quiet > 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    command = parser.commands.get(args.command, parser)  # errors name the command and point at its --help
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    problem = args.validate(args) if getattr(args, "validate", None) else None
    if problem:
        command.error(problem)
    _configure_logging(args)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    what = f"sluice {args.command}"
    try:
        check(getattr(args, "needs", ()), what)
        return int(args.func(args) or 0)
    except MissingDependencyError as e:
        print(f"sluice: error: {e}", file=sys.stderr)
    except ImportError as e:  # a codec imported on first use, deeper down
        missing = from_import_error(e, what)
        if missing is None:
            raise
        print(f"sluice: error: {missing}", file=sys.stderr)
    except (sluice.SluiceError, OSError, ValueError) as e:
        print(f"{what}: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{what}: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
