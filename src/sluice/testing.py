"""Helpers for testing operators: run one operator on given samples, in a real pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.pipeline.batch import Batch
from sluice.pipeline.pipeline import Pipeline
from sluice.schema import get_schema

__all__ = ["run_op"]


def run_op(op_name: str, *inputs: Sequence[Any], device: str = "cpu", layout: str | Sequence[str] = "",
           num_threads: int = 2, seed: int = 1234, device_id: int | None = None, iterations: int = 1,
           input_layout: str | Sequence[str] | None = None, **args: Any) -> Batch | tuple[Batch, ...]:
    """Feed each input (a list of samples) through ``external_source`` into ``fn.<op_name>`` and run once.

    Example::

        out = run_op("flip", [np.zeros((4, 6, 3), np.uint8)], layout="HWC", horizontal=1)
        out[0]     # the flipped sample (torch tensor)

    ``device='gpu'`` or ``'mixed'`` needs CUDA (device_id defaults to 0 then). With ``iterations > 1`` the same
    inputs run again and the last outputs are returned (for random operators).

    ``layout`` is the inputs' layout; for operators that have an argument called ``layout`` themselves
    (``fn.spectrogram``), give the inputs' layout as ``input_layout`` and ``layout`` goes to the operator.
    """
    from sluice.pipeline.graph import make_node
    from sluice import fn

    batch_size = max([len(x) for x in inputs] + [1])
    if device in ("gpu", "mixed") and device_id is None:
        device_id = 0
    if input_layout is not None:
        args["layout"] = layout
        layout = input_layout
    layouts = [layout] * len(inputs) if isinstance(layout, str) else list(layout)
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed,
                    exec_async=False)
    with pipe:
        nodes = [fn.external_source(source=lambda data=list(x): data, layout=lay, cycle=True)
                 for x, lay in zip(inputs, layouts)]
        out = make_node(get_schema(op_name), nodes, dict(args, device=device))
    pipe.set_outputs(*(out if isinstance(out, list) else [out]))
    result: tuple[Batch, ...] = ()
    for _ in range(iterations):
        result = pipe.run()
    pipe.close()
    return result[0] if len(result) == 1 else result
