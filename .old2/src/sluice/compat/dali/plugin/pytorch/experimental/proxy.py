"""``nvidia.dali.plugin.pytorch.experimental.proxy`` on sluice: :class:`DALIServer` and :class:`DataLoader`
(your Dataset and DataLoader workers; the pipeline runs in the main process). These are sluice's own
:mod:`sluice.torch.proxy` classes, which take DALI's arguments: ``DALIServer(pipeline, deterministic=False)`` and
``server.proxy`` with the pipeline's inputs by position (in DALI's order of the ``external_source`` nodes) or by
name.

Example::

    from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy
    with dali_proxy.DALIServer(pipe) as server:
        dataset = MyDataset(transform=server.proxy)      # calls server.proxy(encoded_bytes)
        loader = dali_proxy.DataLoader(server, dataset, batch_size=8, num_workers=2)
"""

from __future__ import annotations

import sys as _sys

from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names
from sluice.torch.proxy import DALIServer, DataLoader

__all__ = ["DALIServer", "DataLoader"]

__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
