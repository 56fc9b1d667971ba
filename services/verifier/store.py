"""A tiny durable store of protobuf messages, one file per key, under the verifier's data dir.

Holds candidate sources (from candidates.proposed, needed when their benchmark arrives) and the
verdicts already reached (a redelivered benchmark republishes the same verdict). Writes are atomic
(temp file + rename), so a crash never leaves half a message behind.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

from services.common.log import get_logger

M = TypeVar("M", bound=Message)
_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")  # ids become file names: nothing that walks paths

log = get_logger("verifier.store")


class ProtoStore(Generic[M]):
    def __init__(self, directory: Path, msg_type: type[M]) -> None:
        self.directory = directory
        self.msg_type = msg_type
        directory.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def valid_key(key: str) -> bool:
        return bool(_KEY.match(key))

    def _path(self, key: str) -> Path:
        if not self.valid_key(key):
            raise ValueError(f"invalid key {key!r}")
        return self.directory / f"{key}.pb"

    def get(self, key: str) -> M | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        message = self.msg_type()
        try:
            message.ParseFromString(data)
        except DecodeError:
            # Keep the bad bytes for a post-mortem; the caller sees "unknown" and recomputes.
            log.error("corrupt store entry set aside", path=str(path))
            os.replace(path, path.with_suffix(".corrupt"))
            return None
        return message

    def put(self, key: str, message: M) -> None:
        path = self._path(key)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(message.SerializeToString())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def __contains__(self, key: str) -> bool:
        return self.valid_key(key) and self._path(key).exists()
