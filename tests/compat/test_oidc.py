"""OIDC / JWT bearer tokens against real identity providers.

Two providers built on the `oidc-provider` package (tests/compat/readme-js/oidc-idp.mjs) listen
on the ports tests/harness/fleet.py trusted in the fleet's config (WEFT_OIDC_PORTS): issuer a for
tenant `oidc-a` (audience `urn:weft:tenant-a`) and issuer b for tenant `oidc-b`. They issue JWT
access tokens through the client_credentials grant; the tests present them to weft's doors with
the clients people use (`openai`, `anthropic`, the MCP SDK) and raw HTTP for forged tokens.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import JS_DIR, TIMEOUT

MODEL = "mock-1"


class Idp:
    """One running oidc-idp.mjs: its issuer URL, tokens on request, key rotation."""

    def __init__(self, node_env, port):
        env, node = node_env
        self.log = Path(tempfile.gettempdir()) / f"weft-oidc-idp-{port}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [str(node), str(JS_DIR / "oidc-idp.mjs"), "--port", str(port)],
                cwd=JS_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=log, text=True,
            )
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            self.proc.kill()
            pytest.fail(f"oidc-idp.mjs on {port} did not start: {line!r} "
                        f"{self.log.read_text()[-2000:]}")
        info = json.loads(line[len("READY "):])
        self.issuer, self.kid = info["issuer"], info["kid"]
        self.http = httpx.Client(base_url=self.issuer, timeout=TIMEOUT)

    def token(self, resource, scope="llm:call runs:read", client="svc"):
        r = self.http.post("/token", data={
            "grant_type": "client_credentials", "client_id": client,
            "client_secret": f"{client}-secret", "resource": resource, "scope": scope,
        })
        assert r.status_code == 200, r.text
        return r.json()["access_token"]

    def rotate(self):
        r = self.http.post("/__rotate")
        assert r.status_code == 200, r.text
        self.kid = r.json()["kid"]

    def stop(self):
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _ports():
    value = os.environ.get("WEFT_OIDC_PORTS", "").strip()
    if not value:
        if os.environ.get("WEFT_REQUIRE_FAKE_UPSTREAM") == "1":
            pytest.fail("WEFT_OIDC_PORTS is not set: deploy/local/test.sh runs the compat suite "
                        "through tests/harness/fleet.py --fake-upstream, which sets it", pytrace=False)
        pytest.skip("WEFT_OIDC_PORTS is not set: the fleet trusts no test identity provider")
    return [int(p) for p in value.split(",")]


@pytest.fixture(scope="module")
def idps(node_env):
    """The two trusted providers (a, b) and one the fleet does not trust (c, any free port)."""
    a_port, b_port = _ports()[:2]
    started = []
    try:
        for port in (a_port, b_port, 0):
            if port == 0:
                import socket
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
            started.append(Idp(node_env, port))
        yield started
    finally:
        for idp in started:
            idp.stop()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _parts(jwt):
    h, p, s = jwt.split(".")
    pad = lambda x: x + "=" * (-len(x) % 4)  # noqa: E731
    return json.loads(base64.urlsafe_b64decode(pad(h))), json.loads(base64.urlsafe_b64decode(pad(p))), s


def _me(root_url, token):
    return httpx.get(f"{root_url}/v1/me", headers={"Authorization": f"Bearer {token}"},
                     timeout=TIMEOUT)


def test_a_providers_token_is_a_principal_of_its_tenant(idps, root_url):
    a, b, _ = idps
    r = _me(root_url, a.token("urn:weft:tenant-a", "llm:call runs:read openid"))
    assert r.status_code == 200, r.text
    me = r.json()
    assert me["tenant"] == "oidc-a" and me["subject"] == "sso:svc"
    # The scope claim maps to weft scopes (within the issuer's max_scopes).
    assert sorted(me["scopes"]) == ["llm:call", "runs:read"]
    r = _me(root_url, b.token("urn:weft:tenant-b", "memory:read"))
    assert r.status_code == 200, r.text
    assert r.json()["tenant"] == "oidc-b" and r.json()["scopes"] == ["memory:read"]


def test_every_door_takes_the_jwt(idps, base_url, root_url):
    a = idps[0]
    jwt = a.token("urn:weft:tenant-a", "llm:call runs:read")
    with openai.OpenAI(base_url=base_url, api_key=jwt, max_retries=0, timeout=TIMEOUT) as c:
        chat = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content
        resp = c.responses.create(model=MODEL, input="hello from an IdP")
        assert resp.status == "completed"
    with anthropic.Anthropic(base_url=root_url, api_key=jwt, max_retries=0, timeout=TIMEOUT) as c:
        msg = c.messages.create(model=MODEL, max_tokens=64,
                                messages=[{"role": "user", "content": "hi"}])
        assert msg.content
    r = httpx.get(f"{root_url}/v1/runs", headers={"Authorization": f"Bearer {jwt}"},
                  timeout=TIMEOUT)
    assert r.status_code == 200, r.text

    async def mcp_tools():
        headers = {"Authorization": f"Bearer {jwt}"}
        async with create_mcp_http_client(headers=headers) as h:
            async with streamable_http_client(f"{root_url}/mcp", http_client=h) as (rd, wr, *_):
                async with ClientSession(rd, wr) as session:
                    await session.initialize()
                    return await session.list_tools()

    assert asyncio.run(mcp_tools()).tools
    # The claim did not grant runs:create: a 403 naming it, not a 401.
    r = httpx.post(f"{root_url}/v1/runs", headers={"Authorization": f"Bearer {jwt}"},
                   json={"agent": "nobody", "input": "x"}, timeout=TIMEOUT)
    assert r.status_code == 403 and "runs:create" in r.text, r.text


def test_tenants_stay_apart(idps, base_url):
    a, b, _ = idps
    ja = a.token("urn:weft:tenant-a", "llm:call")
    jb = b.token("urn:weft:tenant-b", "llm:call")
    with openai.OpenAI(base_url=base_url, api_key=ja, max_retries=0, timeout=TIMEOUT) as ca, \
            openai.OpenAI(base_url=base_url, api_key=jb, max_retries=0, timeout=TIMEOUT) as cb:
        stored = ca.responses.create(model=MODEL, input="tenant a's secret", store=True)
        assert ca.responses.retrieve(stored.id).id == stored.id
        with pytest.raises(openai.NotFoundError):
            cb.responses.retrieve(stored.id)
        # Same subject (`sso:svc`), other tenant: nothing to continue from either (the 400 of
        # an id that never existed).
        with pytest.raises(openai.BadRequestError, match="was not found"):
            cb.responses.create(model=MODEL, input="more", previous_response_id=stored.id)


def _refused(root_url, token, why):
    r = _me(root_url, token)
    assert r.status_code == 401, f"{why}: {r.status_code} {r.text}"
    return r.json()["error"]["message"]


def test_wrong_audience_issuer_expiry_and_forgeries_are_refused(idps, root_url):
    a, b, untrusted = idps
    # Issuer a, but the audience that names tenant b (the provider issues it happily).
    m = _refused(root_url, a.token("urn:weft:tenant-b"), "wrong audience")
    assert "wrong audience" in m
    m = _refused(root_url, untrusted.token("urn:weft:tenant-a"), "untrusted issuer")
    assert "not trusted" in m
    # A token that lives five seconds: accepted, then refused once it has expired.
    short = a.token("urn:weft:tenant-a", "llm:call", client="short")
    exp = _parts(short)[1]["exp"]
    r = _me(root_url, short)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while (r := _me(root_url, short)).status_code == 200:
        assert time.monotonic() < deadline, "the expired token was never refused"
        time.sleep(0.2)
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"], r.text
    assert time.time() >= exp - 1, "refused before it expired"

    good = a.token("urn:weft:tenant-a")
    header, claims, sig = _parts(good)
    body = _b64(json.dumps(claims).encode())
    # alg none: the provider's claims, no signature.
    none = f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{body}."
    assert "alg: none" in _refused(root_url, none, "alg none")
    # HS256 keyed with the provider's public JWKS (the algorithm-confusion forgery).
    jwks = httpx.get(f"{a.issuer}/jwks", timeout=TIMEOUT).content
    h = _b64(json.dumps({"alg": "HS256", "kid": header["kid"], "typ": "JWT"}).encode())
    mac = hmac.new(jwks, f"{h}.{body}".encode(), hashlib.sha256).digest()
    assert "not accepted" in _refused(root_url, f"{h}.{body}.{_b64(mac)}", "HS256")
    # Claims changed under the provider's signature.
    claims2 = {**claims, "sub": "someone-else"}
    tampered = f"{good.split('.')[0]}.{_b64(json.dumps(claims2).encode())}.{sig}"
    assert "signature" in _refused(root_url, tampered, "tampered")
    # A key the JWKS does not list.
    rogue = f"{_b64(json.dumps({**header, 'kid': 'rogue'}).encode())}.{body}.{sig}"
    assert "does not list" in _refused(root_url, rogue, "unlisted key")
    # Not a JWT and not a weft token.
    assert "neither a weft token" in _refused(root_url, "opaque-token-123", "opaque")


def test_a_rotated_key_is_picked_up_and_the_retired_one_refused(idps, root_url):
    b = idps[1]
    old = b.token("urn:weft:tenant-b", "llm:call")
    assert _me(root_url, old).status_code == 200
    old_kid = b.kid
    b.rotate()
    new = b.token("urn:weft:tenant-b", "llm:call")
    assert _parts(new)[0]["kid"] == b.kid != old_kid
    # weft fetches the JWKS again when a token names a key it does not know, at most once a
    # second here (auth.oidc_jwks_min_refresh_secs = 1 in the compat config).
    deadline = time.monotonic() + 15
    while (r := _me(root_url, new)).status_code != 200:
        assert r.status_code == 401 and "does not list" in r.text, r.text
        assert time.monotonic() < deadline, "the rotated key was never picked up"
        time.sleep(0.2)
    assert r.json()["tenant"] == "oidc-b"
    # The key the JWKS no longer lists no longer verifies, though the token has not expired.
    assert "does not list" in _refused(root_url, old, "retired key")
