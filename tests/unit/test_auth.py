"""streamiq.auth: tokens, API keys, scopes, the verification cache, the hop mark."""

from __future__ import annotations

import jwt
import pytest

from streamiq.auth import ANYONE, Authenticator, hop_mark, mint
from streamiq.config import Settings
from streamiq.errors import Forbidden, Unauthenticated

SECRET = "a-jwt-secret-that-is-32-bytes-long!"


def auth() -> Authenticator:
    return Authenticator(enabled=True, jwt_secret=SECRET,
                         api_keys={"k-read": "views:balances", "k-all": "views:* ingest"})


def test_scopes_of_tokens_and_keys() -> None:
    a = auth()
    who = a.principal(f"Bearer {mint(SECRET, scope='views:balances')}")
    assert who.may_read("balances") and not who.may_read("orders") and not who.may_write()
    assert a.principal("Bearer k-all").may_write()
    assert a.reader("Bearer k-read", "balances").subject.startswith("api-key")
    with pytest.raises(Forbidden):
        a.reader("Bearer k-read", "order_counts")
    with pytest.raises(Forbidden):
        a.writer("Bearer k-read")
    # seed 004's tokens have no scope claim: they read every view, write nothing
    seed = jwt.encode({"id": 1, "sub": "testUser"}, SECRET, algorithm="HS256")
    assert a.principal(f"Bearer {seed}").may_read("anything")
    assert not a.principal(f"Bearer {seed}").may_write()


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Token abc", "Bearer k-none",
                                    "Bearer a.b.c", "bearer k-rea"])
def test_what_names_nobody(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        auth().principal(header)


def test_only_hs256_with_the_secret() -> None:
    a = auth()
    unsigned = jwt.encode({"sub": "x"}, "", algorithm="none")  # PyJWT: "" is no key
    with pytest.raises(Unauthenticated):
        a.principal(f"Bearer {unsigned}")
    other = jwt.encode({"sub": "x"}, SECRET + "x", algorithm="HS512")
    with pytest.raises(Unauthenticated):
        a.principal(f"Bearer {other}")
    bad_scope = jwt.encode({"scope": ["views:*"]}, SECRET, algorithm="HS256")
    with pytest.raises(Unauthenticated):
        a.principal(f"Bearer {bad_scope}")


def test_a_verified_token_is_cached_until_it_expires() -> None:
    a = auth()
    token = f"Bearer {mint(SECRET, ttl_s=3600)}".encode()
    assert a.allows(token, "balances") and token in a._cache
    a._cache[token] = (a._cache[token][0], 0.0)  # as if it had expired since
    assert a.allows(token, "balances")  # verified again (still valid by its exp)
    expired = f"Bearer {mint(SECRET, ttl_s=-1)}".encode()
    assert not a.allows(expired, "balances") and expired not in a._cache
    assert not a.allows(None, "balances")


def test_off_lets_everyone_through_and_on_needs_something_to_check() -> None:
    assert Authenticator(enabled=False).principal(None) is ANYONE
    with pytest.raises(ValueError, match="--jwt-secret"):
        Settings(auth=True).check_auth(node=False)
    with pytest.raises(ValueError, match="--cluster-secret"):
        Settings(auth=True, jwt_secret=SECRET).check_auth(node=True)
    with pytest.raises(ValueError, match="whitespace"):
        Settings(auth=True, api_keys={"a b": "views:*"}).check_auth(node=False)
    Settings(auth=True, api_keys={"k": "views:*"}, cluster_secret="c").check_auth(node=True)


def test_the_hop_mark_depends_on_the_secret_only() -> None:
    assert hop_mark("s") == hop_mark("s") != hop_mark("t")
    assert hop_mark(None) == "1" and "s" not in hop_mark("s")
