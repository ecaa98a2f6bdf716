"""The policy server through the OpenAI SDK (what verifiers uses): whole and streamed chat
completions, health and readiness, Prometheus metrics, a bad body answered 400 while the server
lives on, and the stop after ``max_requests``."""

from __future__ import annotations

import time

import httpx
import pytest

from rlplugs.tools.policy_server import serve_policy

openai = pytest.importorskip("openai")


def echo(messages) -> str:
    return f"{len(messages)} messages; last: {messages[-1]['content']}"


def test_openai_client_gets_whole_and_streamed_answers_and_metrics_count_them():
    with serve_policy(echo, model="echo") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local")
        whole = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}])
        assert whole.choices[0].message.content == "1 messages; last: hi"
        stream = client.chat.completions.create(model="echo", stream=True, messages=[
            {"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "parts"}]}])
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "2 messages; last: parts"
        assert [m.id for m in client.models.list()] == ["echo"]
        root = server.base_url.removesuffix("/v1")
        assert httpx.get(root + "/health").json()["ok"] and httpx.get(root + "/ready").status_code == 200
        bad = httpx.post(server.base_url + "/chat/completions", content=b"[1, 2")
        assert bad.status_code == 400 and "bad request body" in bad.json()["error"]["message"]
        metrics = httpx.get(root + "/metrics").text
        assert 'rlplugs_policy_requests_total{route="chat",status="200"} 2.0' in metrics
        assert 'rlplugs_policy_errors_total{kind="bad_request",route="chat"} 1.0' in metrics
        assert server.requests == 2


def test_a_failing_policy_is_a_500_and_the_server_stops_after_max_requests():
    def flaky(messages) -> str:
        if messages[-1]["content"] == "boom":
            raise RuntimeError("policy exploded")
        return "fine"

    with serve_policy(flaky, max_requests=2) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="policy exploded"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "boom"}])
        assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ok"}]).choices[0].message.content == "fine"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(server.base_url + "/models", timeout=1)
            except httpx.TransportError:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the server still answers after max_requests")
