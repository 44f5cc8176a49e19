"""`tenantd notify send` and `tenantd vapid generate`, run as real processes."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.notifications.channels.web_push.vapid import VapidSigner
from tests.factories import run_tenantd


async def test_notify_send(env: dict[str, str], db: Any, factory: Any) -> None:
    user = await factory.user()
    payload = json.dumps({"actorId": str(uuid.uuid4()), "commentId": "cli", "text": "from cli"})
    code, out, err = await run_tenantd(
        env, "notify", "send", "comment.created", "--user", str(user.id), "--payload", payload
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "created"
    row = await db.fetch_one(
        "SELECT user_id, body FROM notifications WHERE id = %(id)s",
        {"id": result["notificationId"]},
    )
    assert row == {"user_id": user.id, "body": "from cli"}
    # The email went out before the command exited (inline jobs are drained).
    status = await db.fetch_val(
        "SELECT status FROM notification_deliveries"
        " WHERE notification_id = %(id)s AND channel = 'email'",
        {"id": result["notificationId"]},
    )
    assert status == "sent"


async def test_notify_send_refusals_exit_1(env: dict[str, str], db: Any, factory: Any) -> None:
    user = await factory.user()
    code, out, err = await run_tenantd(
        env,
        "notify",
        "send",
        "comment.created",
        "--user",
        str(user.id),
        "--payload",
        '{"actorId": 1, "text": ""}',
    )
    assert code == 1 and out == ""
    assert "actorId" in err and "commentId" in err and "text" in err
    assert len(err.strip().splitlines()) == 1
    for args in [
        ["nope.event", "--user", str(user.id), "--payload", "{}"],
        ["ping.simple", "--user", str(uuid.uuid4()), "--payload", "{}"],
        ["ping.simple", "--user", "not-a-user", "--payload", "{}"],
        ["ping.simple", "--user", str(user.id), "--payload", "not json"],
        ["ping.simple", "--user", str(user.id), "--payload", "[1, 2]"],
    ]:
        code, _, err = await run_tenantd(env, "notify", "send", *args)
        assert code == 1, (args, err)
        assert err.startswith("error: ")
    assert await db.fetch_val("SELECT count(*) FROM notifications") == 0
    code, _, _ = await run_tenantd(env, "notify", "send", "ping.simple")
    assert code == 2  # --user is required: usage error


def b64decode(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


async def test_vapid_generate_prints_a_usable_key_set(env: dict[str, str]) -> None:
    code, out, err = await run_tenantd(
        env, "vapid", "generate", "--subject", "mailto:ops@example.com"
    )
    assert code == 0, err
    lines = dict(line.split("=", 1) for line in out.strip().splitlines())
    assert list(lines) == [
        "WEB_PUSH_VAPID_PUBLIC_KEY",
        "WEB_PUSH_VAPID_PRIVATE_KEY",
        "WEB_PUSH_VAPID_SUBJECT",
    ]
    public = b64decode(lines["WEB_PUSH_VAPID_PUBLIC_KEY"])
    private = b64decode(lines["WEB_PUSH_VAPID_PRIVATE_KEY"])
    assert len(public) == 65 and public[0] == 4 and len(private) == 32
    assert lines["WEB_PUSH_VAPID_SUBJECT"] == "mailto:ops@example.com"
    # The private key belongs to the public one.
    derived = ec.derive_private_key(int.from_bytes(private, "big"), ec.SECP256R1())
    assert (
        derived.public_key().public_numbers()
        == ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), public).public_numbers()
    )
    signer = VapidSigner(lines["WEB_PUSH_VAPID_PRIVATE_KEY"], "mailto:ops@example.com")
    assert signer.headers("https://fcm.googleapis.com/fcm/send/x")["Authorization"].startswith(
        "vapid t="
    )
    code, _, _ = await run_tenantd(env, "vapid", "generate", "--subject", "ops@example.com")
    assert code == 2
