"""`scripts/run --port N` prints the address to open and mails links that point at port N."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers import PASSWORD, SECRET
from tests.ui.live import REPO_ROOT, LiveServer, free_port


def test_scripts_run_serves_and_mails_links_to_its_own_port(migrated: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PUBLIC_BASE_URL", "ALLOWED_ORIGINS", "EMAIL_FILE_DIR"}
    }
    env.update(
        DATABASE_URL=migrated,
        TENANTD_DATA_DIR=str(tmp_path),
        SECRET_KEY=SECRET,
        LOG_LEVEL="warning",
        TENANTD_SCHEDULER_ENABLED="false",
        RATE_LIMIT_ENABLED="false",
    )
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "run"), "--port", str(port), "--no-migrate"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    server = LiveServer(
        base=base, env=env, mail_dir=tmp_path / "mail", process=process, log_path=log
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=2):
                    break
            except OSError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert f"open {base}/signup" in log.read_text()
        status, _ = server.api(
            "POST", "/auth/register", {"email": "run@example.com", "password": PASSWORD}
        )
        assert status == 200
        link = server.mail_to("run@example.com", "/verify-email?token=")
        assert link.startswith(f"{base}/verify-email?token=")
        with urllib.request.urlopen(link, timeout=10) as response:  # the link opens a page
            assert response.status == 200
            assert "text/html" in response.headers["Content-Type"]
        # Out of the box a new account may invite, and tenantd's own notifications are on.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())

        def call(method: str, path: str, body: Any = None) -> Any:
            request = urllib.request.Request(
                base + path,
                data=json.dumps(body).encode() if body is not None else None,
                method=method,
                headers={"Origin": base, "Content-Type": "application/json"},
            )
            with browser.open(request, timeout=10) as response:
                return json.loads(response.read())

        token = parse_qs(urlsplit(link).query)["token"][0]
        call("POST", "/auth/verify-email", {"token": token})
        me = call("GET", "/api/v1/users/me")
        me = me.get("data", me)
        assert me["features"]["team_invitations"] is True
        listed = json.dumps(call("GET", "/api/v1/notifications/preferences"))
        assert "tenantd.member.joined" in listed
    finally:
        server.stop()
