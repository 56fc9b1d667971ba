"""The LLM agent against a local server speaking the OpenAI chat-completions protocol (recorded answers)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.agents.prompt import InvalidProposal, extract_module
from services.common import subjects
from services.common.bus import Bus
from tests.agent_pool.conftest import Collector, FakeEngine, drift, result, wait_for

GOOD = '''import torch

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    xf = x.float()
    inv = torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + eps)
    return (xf * inv * weight.float()).to(x.dtype)
'''
OTHER = GOOD.replace("torch.mean(xf * xf, dim=-1, keepdim=True)", "xf.square().mean(dim=-1, keepdim=True)")
ANSWERS = [
    "I would fuse the weight multiply, but I cannot write code right now.",  # rejected: no module
    f"Fusing the weight into the float32 product:\n\n```python\n{GOOD}```\nThat saves one pass.",
    f"```python\n{OTHER}```",
]


class FakeOpenAI(BaseHTTPRequestHandler):
    answers: list[str] = []
    requests: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions", self.path
        type(self).requests.append(body)
        text = type(self).answers.pop(0) if type(self).answers else "no more ideas"
        payload = json.dumps({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def llm_server() -> Iterator[str]:
    FakeOpenAI.answers = list(ANSWERS)
    FakeOpenAI.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


async def test_llm_agent_proposes_validated_code_beside_the_search_agent(bus: Bus, pool, llm_server: str) -> None:
    await pool(campaign_budget=4, agent_in_flight=1, agent_slots="rmsnorm", llm_base_url=llm_server,
               llm_model="recorded-model", llm_api_key="sk-test", llm_share=0.5)
    notes = await Collector.on(bus, f"{subjects.BOARD_PREFIX}.>", ev.BoardNote, "t-board")
    completed = await Collector.on(bus, subjects.CAMPAIGN_COMPLETED, ev.Campaign, "t-completed")
    engine = await FakeEngine(bus, score=lambda c: result(c, 1.5 if c.agent == "llm" else 1.1)).start()
    await bus.publish(subjects.TRAFFIC_DRIFT, drift("drift-llm"), msg_id="drift-llm")
    await wait_for(lambda: bool(completed.items))

    by_agent = {a: [c for c in engine.candidates if c.agent == a] for a in ("llm", "search")}
    assert len(by_agent["llm"]) == 2 and len(by_agent["search"]) == 2  # the baseline always runs
    assert GOOD in by_agent["llm"][0].source and OTHER in by_agent["llm"][1].source
    assert by_agent["llm"][0].params["llm_model"] == "recorded-model"
    assert by_agent["llm"][0].backend == ev.BACKEND_TORCH and list(by_agent["llm"][0].shapes)

    first, *_, last = FakeOpenAI.requests
    assert first["model"] == "recorded-model"
    prompt = first["messages"][-1]["content"]
    assert "kernel(x, weight, eps)" in prompt and "decode: batch 3, context 700, weight 0.70" in prompt
    assert "def kernel(x, weight, eps)" in prompt  # the reference implementation
    later = last["messages"][-1]["content"]
    assert "rejected" in later and "1.100x" in later  # feedback: the rejection and the search result
    await wait_for(lambda: any(n.agent == "llm" and "rejected an LLM reply" in n.text for n in notes.items), 5)
    assert any(n.agent == "llm" and "1.500x" in n.text for n in notes.items)


def test_replies_are_validated_before_they_become_candidates() -> None:
    assert extract_module(f"```py\n{GOOD}```", "rmsnorm").startswith("import torch")
    compiled = GOOD.replace("def kernel(", "def _impl(") + "\nkernel = torch.compile(_impl)\n"
    assert "torch.compile" in extract_module(f"```python\n{compiled}```", "rmsnorm")
    cases = {
        "SLOT must be 'silu_mul'": (GOOD, "silu_mul"),
        "kernel must take (x, weight, eps)": (GOOD.replace("(x, weight, eps)", "(x, w, eps)"), "rmsnorm"),
        "syntax error": (GOOD.replace("xf = x.float()", "xf = x.float("), "rmsnorm"),
        "import of 'os'": ("import os\n" + GOOD, "rmsnorm"),
        "BACKEND must be": (GOOD.replace('"torch"', '"cuda"'), "rmsnorm"),
        "no module-level kernel": (GOOD.replace("def kernel(", "def other("), "rmsnorm"),
    }
    for why, (source, slot) in cases.items():
        with pytest.raises(InvalidProposal, match=why.replace("(", r"\(").replace(")", r"\)")):
            extract_module(f"```python\n{source}```", slot)


def test_the_agent_pool_starts_without_the_llm_client_when_no_endpoint_is_set(tmp_path) -> None:
    # a GPU machine with no package index may lack openai and httpx: without POLYMORPH_LLM_BASE_URL
    # the service must neither need nor load them
    import os
    import subprocess
    import sys

    probe = ("import sys\n"
             "from services.agent_pool.__main__ import build\n"
             "from services.common.config import CommonSettings, Env\n"
             "build(Env.current(), CommonSettings.from_env())\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'httpx', 'httpx2')))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYMORPH_LLM")}
    env["POLYMORPH_DATA_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[:500]
