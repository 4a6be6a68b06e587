"""Where the threads of a running sluice pipeline spend their time: a sampling profiler (no py-spy on the device).

A daemon thread reads ``sys._current_frames()`` every ``--interval`` seconds and counts, per thread name, the
innermost frame (function and line) and the innermost frame inside sluice. A thread waiting in C code (a decoder
call that released the GIL, a lock) shows the Python line that called it, so the counts are wall-time shares per
thread, not CPU time. The sampler needs the GIL too, so a thread that holds it for long stretches is
under-counted; read the figures as a map of where the time goes, not as exact shares.

Usage::

    python benchmarks/stack_profile.py /tmp/imagenet_like --seconds 20 --what train decode

Prints the pipeline's images/s and, per thread group, the top lines.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_pipeline import decode_pipe, train_pipe  # noqa: E402

from sluice.torch import DALIGenericIterator  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")


class StackSampler:
    """Counts each thread's innermost frame and innermost sluice frame at a fixed interval."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.leaf: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.samples: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    @staticmethod
    def _group(name: str) -> str:
        return re.sub(r"[_-]?\d+(_\d+)?$", "", name)  # pool threads 'x_0', 'x_1' ... counted together

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                group = self._group(names.get(ident, "?"))
                self.samples[group] += 1
                code = frame.f_code
                self.leaf[group][f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno})"] += 1
                f = frame
                while f is not None and not f.f_code.co_filename.startswith(SRC):
                    f = f.f_back
                if f is not None:
                    self.own[group][f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})"] += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int) -> None:
        for group, total in self.samples.most_common():
            if total < 20:
                continue
            print(f"  thread group {group!r}: {total} samples")
            for title, counter in (("innermost frame", self.leaf[group]), ("innermost sluice frame", self.own[group])):
                print(f"    {title}:")
                for key, count in counter.most_common(top):
                    print(f"      {100.0 * count / total:5.1f} %  {key}")


def profile(name: str, pipe, seconds: float, batch: int, interval: float, top: int | None) -> None:
    pipe.build()
    it = DALIGenericIterator(pipe, ["data", "label"], auto_reset=True,
                             ragged_outputs=["data"] if name == "decode" else None)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(4):
        next(it)
    sync()
    n = 0
    with StackSampler(interval) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            next(it)
            n += 1
        sync()
        dt = time.perf_counter() - t0
    print(f"PROFILE {name}: {n * batch / dt:,.0f} images/s over {n} batches (switch interval "
          f"{sys.getswitchinterval() * 1e3:g} ms)")
    if top:
        sampler.report(top)
    if hasattr(pipe, "close"):
        pipe.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.001)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--files", type=int, default=8192)
    ap.add_argument("--switch-interval", type=float, help="sys.setswitchinterval (seconds) before building")
    ap.add_argument("--quiet", action="store_true", help="throughput only, no per-thread report")
    ap.add_argument("--cpu", action="store_true", help="decode and augment on the CPU (smoke test only)")
    ap.add_argument("--what", nargs="+", default=["train", "decode"], choices=["train", "decode"])
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    files = sorted(str(p) for p in args.folder.rglob("*.jpg"))[: args.files]
    common = dict(batch_size=args.batch, num_threads=args.threads, device_id=None if args.cpu else 0, seed=1,
                  prefetch_queue_depth=2)
    decoder, dev = ("cpu", "cpu") if args.cpu else ("mixed", "gpu")
    for what in args.what:
        pipe = (train_pipe(files, decoder, dev, 224, **common) if what == "train"
                else decode_pipe(files, decoder, **common))
        profile(what, pipe, args.seconds, args.batch, 0.5 if args.quiet else args.interval,
                None if args.quiet else args.top)


if __name__ == "__main__":
    main()
