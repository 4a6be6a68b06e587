"""Summarise a py-spy raw (collapsed) profile: per thread, the share of samples and the top functions.

    python benchmarks/diag/pyspy_summary.py profile.txt [--top 25]

py-spy's ``-f raw`` writes one line per distinct stack: ``frame;frame;...;leaf COUNT``; with ``--threads`` the
first frame is the thread, with ``--gil`` only samples taken while a thread held the GIL are written. Prints, per
thread group, its share of all samples and the leaf frames (self time) and sluice frames (inclusive) that hold
most of them.
"""

from __future__ import annotations

import argparse
import collections
import re


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    total = 0
    by_thread: collections.Counter = collections.Counter()
    leaf: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    incl: collections.Counter = collections.Counter()
    for line in open(args.path):
        line = line.rstrip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        thread = re.sub(r"(0x[0-9a-f]+|\d+)", "#", frames[0])
        total += n
        by_thread[thread] += n
        leaf[thread][frames[-1]] += n
        seen = set()
        for f in frames[1:]:
            name = re.sub(r":\d+\)$", ")", f)
            if name not in seen and ("sluice" in f or "nvidia" in f or "side_by_side" in f):
                seen.add(name)
                incl[name] += n
    print(f"samples {total}")
    for thread, n in by_thread.most_common(12):
        print(f"\n== {thread}: {100 * n / total:.1f} %")
        for f, c in leaf[thread].most_common(args.top // 2):
            print(f"   {100 * c / total:5.1f} %  {f}")
    print("\n== inclusive (sluice frames, all threads)")
    for f, c in incl.most_common(args.top):
        print(f"   {100 * c / total:5.1f} %  {f}")


if __name__ == "__main__":
    main()
