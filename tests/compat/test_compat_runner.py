"""``python -m sluice.compat program.py``: an unchanged DALI program runs on sluice."""

from __future__ import annotations

import subprocess
import sys
import textwrap

DALI_PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np
    from nvidia.dali import pipeline_def
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        data = fn.external_source(source=lambda: [np.arange(4, dtype=np.int32)] * 2)
        return fn.cast(data * 3, dtype=types.FLOAT)

    def child_view():
        import nvidia.dali.fn as child_fn
        return child_fn.readers.file.__module__

    if __name__ == "__main__":
        (out,) = pipe().run()
        print("result", out.at(1).tolist(), sys.argv[1:])
        if "--spawn" in sys.argv:
            import multiprocessing
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print("child", pool.apply(child_view))
""")


def test_runner_runs_an_unchanged_dali_program_and_its_spawned_children(tmp_path):
    script = tmp_path / "dali_program.py"
    script.write_text(DALI_PROGRAM)
    done = subprocess.run([sys.executable, "-m", "sluice.compat", str(script), "--spawn"], capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert "result [0.0, 3.0, 6.0, 9.0] ['--spawn']" in done.stdout
    assert "child sluice.compat.dali.fn.readers" in done.stdout  # the spawned child resolved nvidia.dali too


def test_runner_usage(capsys):
    from sluice.compat.__main__ import main

    assert main([]) == 2
    assert "usage: python -m sluice.compat" in capsys.readouterr().err
