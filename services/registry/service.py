"""The registry service: opens the DuckDB file, consumes the LOOP stream, answers SQL and export."""

from __future__ import annotations

from functools import partial

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from services.common.log import get_logger
from services.common.signing import PUBLIC_FILE, Signer
from services.registry.config import RegistryConfig
from services.registry.consumers import start_consumers, utc_now
from services.registry.db import Database
from services.registry.experience import experience
from services.registry.export import export_tables
from services.registry.outbox import Outbox
from services.registry.readers import QueryTimeout
from services.registry.sql import run_query

log = get_logger("registry")
REPLY_HEADROOM_BYTES = 16 * 1024  # leaves room for columns, types and framing in a SqlReply


class RegistryService:
    name = "registry"

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self.db: Database | None = None
        self._bus: Bus | None = None

    async def start(self, bus: Bus) -> None:
        cfg = self.config
        self._bus = bus
        self.db = Database(cfg.db_path, staging_dir=cfg.staging_dir, lockdown=cfg.lockdown,
                           threads=cfg.threads, memory_limit=cfg.memory_limit, readers=cfg.sql_readers)
        await self.db.open()
        signer = Signer.load_or_create(cfg.signing_dir)
        log.info("signing promotions", key_id=signer.key_id, public_key=str(cfg.signing_dir / PUBLIC_FILE))
        box = Outbox(self.db, bus, utc_now, signer)
        owed = await box.flush()  # decisions committed before a crash but never announced
        if owed:
            log.info("published announcements owed from before the restart", count=owed)
        await start_consumers(bus, self.db, box, max_deliver=cfg.max_deliver,
                              candidate_deliveries=cfg.candidate_deliveries,
                              public_key=signer.private.public_key())
        # as many requests at once as there are readers; more wait their turn in the subscription
        await bus.serve(subjects.REGISTRY_SQL, ev.SqlRequest, ev.SqlReply, self._sql, concurrency=cfg.sql_readers)
        await bus.serve(subjects.REGISTRY_EXPORT, ev.ExportRequest, ev.ExportReply, self._export)
        await bus.serve(subjects.REGISTRY_EXPERIENCE, ev.ExperienceRequest, ev.ExperienceReply, self._experience)
        await bus.nc.flush()  # the server knows our subscriptions before anyone is told we are up
        log.info("registry ready", db=str(cfg.db_path))

    async def stop(self) -> None:
        if self.db is not None:
            await self.db.close()
            self.db = None

    async def _sql(self, request: ev.SqlRequest) -> ev.SqlReply:
        assert self.db is not None and self._bus is not None
        max_bytes = max(self._bus.nc.max_payload - REPLY_HEADROOM_BYTES, 64 * 1024)
        readers = self.db.readers
        if readers is not None and readers.busy == readers.size:
            log.info("every SQL reader is busy; the query waits for one", readers=readers.size)
        try:
            query = partial(run_query, default_rows=self.config.sql_max_rows,
                            row_limit=self.config.sql_row_limit, max_bytes=max_bytes)
            return await self.db.read(query, request, timeout_s=self.config.sql_timeout_s)
        except QueryTimeout as exc:
            return ev.SqlReply(error=str(exc))

    async def _experience(self, request: ev.ExperienceRequest) -> ev.ExperienceReply:
        assert self.db is not None
        try:
            return await self.db.read(experience, request, timeout_s=self.config.sql_timeout_s)
        except QueryTimeout as exc:
            return ev.ExperienceReply(error=str(exc))

    async def _export(self, request: ev.ExportRequest) -> ev.ExportReply:
        assert self.db is not None
        reply = await self.db.read(export_tables, request, self.config.export_root, self.config.staging_dir)
        log.info("exported", dir=request.dir, files=len(reply.files), error=reply.error)
        return reply
