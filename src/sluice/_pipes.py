"""Length-prefixed pickles over a pipe: the protocol between sluice and its worker processes.

Standard library only: worker scripts load this file by path (:func:`load_by_path`), so that they import neither
sluice nor torch.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

HEADER = struct.Struct("<Q")


def send(stream, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream) -> Any:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError("the pipe closed")
    (size,) = HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed mid-message")
    return pickle.loads(data)
