"""The runnable snippets of the README and the manual: a fenced block right after a
`<!-- run: NAME -->` line (invisible on the page) is run by the test RUNNERS names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
MARKED = re.compile(r"^<!-- run: ([\w-]+) -->\n```(\w*)\n(.*?)^```", re.S | re.M)

# Snippet name -> the test file that runs it (each also names the snippet).
RUNNERS = {
    "verify-python": "tests/auth/test_verify_snippets.py",
    "verify-node": "tests/auth/test_verify_snippets.py",
    "curl-tour": "tests/docs/test_snippets.py",
    "event-definition": "tests/docs/test_snippets.py",
    "throttle-definition": "tests/docs/test_snippets.py",
    "cli": "tests/docs/test_snippets.py",
    "send-curl": "tests/docs/test_send_snippets.py",
    "send-node": "tests/docs/test_send_snippets.py",
    "verify-webhook": "tests/docs/test_send_snippets.py",
    "client-node": "tests/clients/test_doc_snippets.py",
    "client-python": "tests/clients/test_doc_snippets.py",
    "same-origin-env": "tests/web/test_cross_origin_docs.py",
    "sibling-env": "tests/web/test_cross_origin_docs.py",
    "cross-origin-page": "tests/ui/test_cross_origin.py",
    "components-page": "tests/ui/test_components.py",
    "tutorial-env": "tests/ui/test_tutorial_own_app.py",
    "tutorial-events": "tests/ui/test_tutorial_own_app.py",
    "tutorial-backend": "tests/ui/test_tutorial_own_app.py",
    "tutorial-page": "tests/ui/test_tutorial_own_app.py",
    "define-event-node": "tests/docs/test_event_catalog_snippets.py",
    "event-catalog-yaml": "tests/docs/test_event_catalog_snippets.py",
}


@dataclass(frozen=True)
class Snippet:
    name: str
    language: str
    code: str
    page: Path


def all_snippets() -> list[Snippet]:
    return [
        Snippet(match.group(1), match.group(2), match.group(3), page)
        for page in PAGES
        for match in MARKED.finditer(page.read_text())
    ]


def snippets(name: str) -> list[Snippet]:
    found = [snippet for snippet in all_snippets() if snippet.name == name]
    assert found, f"no block marked <!-- run: {name} --> in README.md or docs/"
    return found


def snippet(name: str) -> Snippet:
    (only,) = snippets(name)
    return only
