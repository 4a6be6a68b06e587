"""Who starts threads, processes and shared memory (issue 37: the pipeline's runtime is to own all of them): a scan
of sluice's sources, with ``ast``, for the calls that make them, against the modules that still do so today. A new
module that starts its own pool, process or shared memory fails here; each entry below leaves the list as the
runtime takes its work over, and the test then asks for the entry to go."""

from __future__ import annotations

import ast
from pathlib import Path

import sluice

SRC = Path(sluice.__file__).resolve().parent

#: Calls that make a thread, a process or shared memory, by the name they are called by.
MAKERS = {"Thread", "ThreadPoolExecutor", "ThreadPool", "RuntimePool", "Process", "Pool", "get_context",
          "SharedMemory", "memfd_create", "fork", "Popen"}

#: The modules that still make them, with how many such calls each holds: the pipeline's runtime (runtime.py: its
#: CPU pool and purpose pools, its service threads, the S3 backend's thread where the caller runs an event loop) and
#: the one worker-process mechanism (_workers.py: its processes, their watchdog thread, the memory files it hands out).
OWNERS = {
    "runtime.py": 4,
    "_workers.py": 6,
    "torch/proxy.py": 1,
    "video_cli.py": 2,
    "testing.py": 2,   # the S3 test server (sluice.testing), not the pipeline
}


def _makers(path: Path) -> int:
    count = 0
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            count += name in MAKERS
    return count


def test_only_the_known_modules_start_threads_processes_or_shared_memory():
    found = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.py")) if (n := _makers(p))}
    new = {m: n for m, n in found.items() if n > OWNERS.get(m, 0)}
    assert not new, f"threads, processes or shared memory made outside the runtime's known owners: {new}"
    gone = sorted(m for m in OWNERS if found.get(m, 0) < OWNERS[m])
    assert not gone, f"these modules make fewer than listed: lower their entries in OWNERS: {gone}"
