"""The board: notes agents share on board.<campaign_id>, read back from every campaign.

On start the pool reads the notes already in the LOOP stream (so a new campaign is seeded with what
earlier ones learned), then follows new ones live. Notes are kept per slot, newest last, bounded.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, defaultdict

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus, Poison, parse
from services.common.log import get_logger

log = get_logger("agent_pool.board")

ALL_NOTES = f"{subjects.BOARD_PREFIX}.>"


class Board:
    def __init__(self, bus: Bus, per_slot: int = 200) -> None:
        self.bus = bus
        self.per_slot = per_slot
        self._notes: dict[str, OrderedDict[str, ev.BoardNote]] = defaultdict(OrderedDict)

    async def start(self) -> None:
        await self._read_history()
        await self.bus.subscribe(ALL_NOTES, ev.BoardNote, self._on_live)

    async def _read_history(self) -> None:
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=60.0
        )
        sub = await self.bus.js.pull_subscribe(ALL_NOTES, stream=subjects.stream_for(ALL_NOTES), config=config)
        info = await sub.consumer_info()
        try:
            if info.num_pending == 0:
                return
            while True:
                try:
                    msgs = await sub.fetch(256, timeout=1.0)
                except nats.errors.TimeoutError:
                    return
                for msg in msgs:
                    with contextlib.suppress(Poison):  # a malformed note teaches nothing
                        self.add(parse(ev.BoardNote, msg.data))
                if msgs[-1].metadata.num_pending == 0:
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):  # it would expire by itself after inactive_threshold
                await self.bus.js.delete_consumer(subjects.stream_for(ALL_NOTES), info.name)

    async def _on_live(self, note: ev.BoardNote) -> None:
        self.add(note)

    def add(self, note: ev.BoardNote) -> None:
        if not note.slot:
            return
        notes = self._notes[note.slot]
        notes[note.note_id or str(len(notes))] = note
        while len(notes) > self.per_slot:
            notes.popitem(last=False)

    def notes(self, slot: str) -> list[ev.BoardNote]:
        return list(self._notes.get(slot, {}).values())

    async def post(self, note: ev.BoardNote) -> None:
        self.add(note)
        await self.bus.publish(subjects.board(note.campaign_id), note, msg_id=note.note_id)
