"""The `file` provider: one RFC 5322 .eml file per message (development and tests).

It honours idempotency keys as Resend does: a keyed message is written once per key (a
`.sent/<hash>` link to its file marks the key), and its Message-ID derives from the key.
"""

from __future__ import annotations

import asyncio
import email.message
import email.utils
import hashlib
import os
import time
import uuid
from pathlib import Path

from tenantd.email.message import EmailMessage


def build_mime(
    message: EmailMessage, *, sender: str, message_id: str
) -> email.message.EmailMessage:
    mime = email.message.EmailMessage()
    mime["From"] = sender
    mime["To"] = message.to
    mime["Subject"] = message.subject
    mime["Date"] = email.utils.formatdate(localtime=False)
    mime["Message-ID"] = message_id
    for name, value in message.headers.items():
        mime[name] = value
    mime.set_content(message.text)
    if message.html is not None:
        mime.add_alternative(message.html, subtype="html")
    return mime


class FileSender:
    name = "file"
    honours_key = True

    def __init__(self, directory: Path):
        self.directory = directory

    async def send(self, message: EmailMessage, *, sender: str) -> str | None:
        key = message.idempotency_key
        digest = hashlib.sha256(key.encode()).hexdigest()[:32] if key else None
        if digest is not None:
            message_id = f"<{digest}@tenantd.local>"
        else:
            message_id = email.utils.make_msgid(domain="tenantd.local")
        mime = build_mime(message, sender=sender, message_id=message_id)
        # RFC 5322 allows 998-character lines; folding at 78 would turn a long unbreakable
        # header (List-Unsubscribe URL) into RFC 2047 encoded words mail clients cannot use.
        raw = mime.as_bytes(policy=mime.policy.clone(max_line_length=998))
        await asyncio.to_thread(self._write, raw, digest)
        return message_id

    def _write(self, data: bytes, digest: str | None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        mark = None
        if digest is not None:
            marks = self.directory / ".sent"
            marks.mkdir(exist_ok=True)
            mark = marks / digest
            if mark.exists():
                return  # written before under this key
        name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.eml"
        temporary = self.directory / f".{name}.tmp"
        temporary.write_bytes(data)
        os.replace(temporary, self.directory / name)  # readers never see half a file
        if mark is not None:
            # Right after the file: a crash between the two writes is the one way to write
            # a keyed message twice.
            try:
                os.link(self.directory / name, mark)
            except FileExistsError:
                pass
            except OSError:  # no hard links here: an empty mark does the same
                mark.touch()
