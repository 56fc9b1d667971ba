"""The LLM agent: any OpenAI-compatible chat-completions endpoint turns a slot's context into code.

Off unless POLYMORPH_LLM_BASE_URL is set. A reply becomes a candidate only after `prompt.validate`
(syntax, SLOT, BACKEND, kernel signature, imports); a rejected reply is fed back into the next prompt
and shared on the board. An endpoint that keeps failing is skipped for the rest of the campaign.
"""

from __future__ import annotations

import time

import openai

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.agents.base import Proposal, SlotContext, Trial
from services.agent_pool.agents.prompt import InvalidProposal, backend_of, build_messages, extract_module
from services.agent_pool.config import LlmSettings
from services.agent_pool.library import candidate_id
from services.common.log import get_logger

log = get_logger("agent_pool.llm")

MAX_ENDPOINT_ERRORS = 3


class LlmAgent:
    name = "llm"

    def __init__(self, settings: LlmSettings) -> None:
        assert settings.base_url, "the LLM agent needs POLYMORPH_LLM_BASE_URL"
        self.settings = settings
        self.client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "unused",
            timeout=settings.timeout_s,
            max_retries=1,
        )
        self._rejections: dict[tuple[str, str], list[str]] = {}
        self._errors: dict[str, int] = {}  # per campaign: consecutive endpoint failures
        self._notes: list[ev.BoardNote] = []

    async def close(self) -> None:
        await self.client.close()

    def available(self, campaign_id: str) -> bool:
        return self._errors.get(campaign_id, 0) < MAX_ENDPOINT_ERRORS

    async def propose(self, ctx: SlotContext, n: int) -> list[Proposal]:
        key = (ctx.campaign_id, ctx.slot)
        rejections = self._rejections.setdefault(key, [])
        taken = set(ctx.excluded) | {t.candidate_id for t in ctx.trials}
        out: list[Proposal] = []
        for _ in range(n):
            if not self.available(ctx.campaign_id):
                break
            try:
                reply = await self.client.chat.completions.create(
                    model=self.settings.model,
                    messages=build_messages(ctx, rejections),
                    temperature=self.settings.temperature,
                )
            except Exception as exc:  # any endpoint trouble (HTTP, protocol, timeout) skips this turn
                self._errors[ctx.campaign_id] = self._errors.get(ctx.campaign_id, 0) + 1
                log.warning("llm endpoint failed", campaign=ctx.campaign_id, slot=ctx.slot, error=str(exc))
                continue
            self._errors[ctx.campaign_id] = 0
            text = (reply.choices[0].message.content or "") if reply.choices else ""
            try:
                source = ctx.stamp(extract_module(text, ctx.slot))
            except InvalidProposal as exc:
                rejections.append(str(exc))
                self._note(ctx, f"{ctx.slot}: rejected an LLM reply before proposing it: {exc}")
                log.info("llm reply rejected", campaign=ctx.campaign_id, slot=ctx.slot, reason=str(exc))
                continue
            cid = candidate_id(ctx.slot, source)
            if cid in taken:
                rejections.append("it repeated a candidate that was already tried")
                continue
            taken.add(cid)
            params = {"agent": self.name, "llm_model": self.settings.model, "backend": backend_of(source)}
            out.append(Proposal(ctx.slot, source, params, self.name, ctx.best.candidate_id if ctx.best else ""))
        return out

    def _note(self, ctx: SlotContext, text: str) -> None:
        n = len(self._notes)
        self._notes.append(
            ev.BoardNote(
                note_id=f"{ctx.campaign_id}.{self.name}.{ctx.slot}.{int(time.time() * 1e6)}.{n}",
                campaign_id=ctx.campaign_id, agent=self.name, slot=ctx.slot, text=text,
                created_unix=time.time(),
            )
        )

    def notes_for(self, ctx: SlotContext, trial: Trial, improved: bool) -> list[ev.BoardNote]:
        if trial.agent != self.name:
            return []
        outcome = f"{trial.speedup:.3f}x" if trial.ok else f"failed ({trial.status}): {trial.reason[:300]}"
        return [
            ev.BoardNote(
                note_id=f"{ctx.campaign_id}.{self.name}.{trial.candidate_id}",
                campaign_id=ctx.campaign_id, agent=self.name, slot=ctx.slot,
                text=f"{ctx.slot}: LLM candidate {trial.candidate_id} {outcome}"
                + (" (new best in this campaign)" if improved else ""),
                score=trial.speedup if trial.ok else 0.0, created_unix=time.time(),
            )
        ]

    def drain_notes(self) -> list[ev.BoardNote]:
        notes, self._notes = self._notes, []
        return notes
