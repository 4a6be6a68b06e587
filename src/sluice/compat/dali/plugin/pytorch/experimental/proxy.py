"""``nvidia.dali.plugin.pytorch.experimental.proxy`` on sluice: :class:`DALIServer` and :class:`DataLoader`
(your Dataset and DataLoader workers; the pipeline runs in the main process). See :mod:`sluice.torch.proxy`.

As in DALI, ``DALIServer(pipeline, deterministic=False)`` takes the ordering flag and ``server.proxy`` accepts
the pipeline's inputs by position (in the order the pipeline defines its ``external_source`` nodes) or by name.

Example::

    from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy
    with dali_proxy.DALIServer(pipe) as server:
        dataset = MyDataset(transform=server.proxy)      # calls server.proxy(encoded_bytes)
        loader = dali_proxy.DataLoader(server, dataset, batch_size=8, num_workers=2)
"""

from __future__ import annotations

import sys as _sys
from typing import Any

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.errors import ArgumentError
from sluice.pipeline.pipeline import Pipeline
from sluice.torch import proxy as _proxy

__all__ = ["DALIServer", "DataLoader"]


class _PositionalProxy:
    """``server.proxy``: DALI's calling convention (inputs by position or by name) over sluice's (by name)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        names = self.inner.input_names
        if inputs:
            if len(inputs) + len(named) != len(names) or len(inputs) > len(names):
                raise ArgumentError(f"proxy() takes {len(names)} input(s) {list(names)}, by position or by name; "
                                    f"got {len(inputs)} positional and {sorted(named)}")
            named = {**dict(zip(names, inputs)), **named}
        return self.inner(**named)

    def __repr__(self) -> str:
        return repr(self.inner)


class DALIServer(_proxy.DALIServer):
    """sluice's :class:`sluice.torch.proxy.DALIServer` with DALI's constructor (``deterministic`` here instead of on
    the DataLoader) and DALI's positional ``proxy`` calls."""

    def __init__(self, pipeline: Pipeline, deterministic: bool = False, **kwargs: Any):
        super().__init__(pipeline, **kwargs)
        self.deterministic = bool(deterministic)
        self._positional = _PositionalProxy(self._proxy)

    @property
    def proxy(self) -> _PositionalProxy:
        return self._positional

    def __reduce__(self):
        return _proxy._ServerHandle, (self._positional,)


class DataLoader(_proxy.DataLoader):
    """sluice's :class:`sluice.torch.proxy.DataLoader`; ``deterministic`` defaults to the server's."""

    def __init__(self, server: DALIServer, dataset: Any, *args: Any, **kwargs: Any):
        kwargs.setdefault("deterministic", getattr(server, "deterministic", False))
        super().__init__(server, dataset, *args, **kwargs)


__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
