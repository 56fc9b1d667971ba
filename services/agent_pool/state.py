"""Campaign state in a JetStream KeyValue bucket, so a SIGKILLed agent pool resumes where it stopped.

Keys:
  campaign.<campaign_id>                 the Campaign message plus the pool's own bookkeeping (JSON)
  cand.<campaign_id>.<candidate_id>      one Trial: what was proposed, whether it went out, its result

A trial is written *before* its candidate is published (published=false) and again after; on resume
the unpublished ones are published again (same msg_id, so JetStream drops a duplicate). Everything
else a campaign needs (best per slot, plateau counters) is recomputed from the trials.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from google.protobuf import json_format
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.agents.base import Trial
from services.common.log import get_logger

log = get_logger("agent_pool.state")

QUEUED, RUNNING, COMPLETED, SUPERSEDED, FAILED = "queued", "running", "completed", "superseded", "failed"


@dataclass
class CampaignRecord:
    campaign: ev.Campaign
    status: str  # queued, running, completed, superseded (a newer drift for the same model replaced it)
    triton: bool  # decided once at creation, so a resumed campaign searches the same space
    announced: bool = False  # campaigns.started went out
    hardware: str = ""  # the engine's, as engine.discover named it at creation (warm starts match on it)

    @property
    def campaign_id(self) -> str:
        return self.campaign.campaign_id

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "campaign": json_format.MessageToDict(self.campaign, preserving_proto_field_name=True),
                "status": self.status,
                "triton": self.triton,
                "announced": self.announced,
                "hardware": self.hardware,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CampaignRecord:
        raw = json.loads(data)
        campaign = json_format.ParseDict(raw["campaign"], ev.Campaign())
        return cls(campaign, raw["status"], bool(raw["triton"]), bool(raw.get("announced", False)),
                   str(raw.get("hardware", "")))


class Store:
    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str) -> Store:
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=1, storage=StorageType.FILE))
        except BadRequestError:  # exists with another configuration (or another process raced us)
            kv = await js.key_value(bucket)
        return cls(kv)

    async def put_campaign(self, record: CampaignRecord) -> None:
        await self.kv.put(f"campaign.{record.campaign_id}", record.to_json())

    async def put_trial(self, campaign_id: str, trial: Trial) -> None:
        # serialised and sent without an await in between: the last write sent is the newest state
        await self.kv.put(f"cand.{campaign_id}.{trial.candidate_id}", json.dumps(asdict(trial)).encode())

    async def load(self) -> tuple[dict[str, CampaignRecord], dict[str, list[Trial]]]:
        """Every campaign record and every trial, by campaign id."""
        records: dict[str, CampaignRecord] = {}
        trials: dict[str, list[Trial]] = {}
        watcher = await self.kv.watchall(ignore_deletes=True)
        try:
            async for entry in watcher:
                if entry is None:  # the initial values are all delivered
                    break
                try:
                    kind, _, rest = entry.key.partition(".")
                    if kind == "campaign":
                        records[rest] = CampaignRecord.from_json(entry.value)
                    elif kind == "cand":
                        campaign_id = rest.split(".", 1)[0]
                        trials.setdefault(campaign_id, []).append(Trial(**json.loads(entry.value)))
                except (ValueError, TypeError, KeyError, json_format.ParseError) as exc:
                    log.error("unreadable state entry skipped", key=entry.key, error=str(exc))
        finally:
            await watcher.stop()
        for items in trials.values():
            items.sort(key=lambda t: t.created_unix)
        return records, trials
