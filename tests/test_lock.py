"""requirements.lock covers every dependency pyproject.toml declares (runtime, the dev extra,
the build backend), with an exact version that meets pyproject's bound and at least one hash;
the bootstrap installs from it and reinstalls when it changes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# A pin, with the extras the lock keeps (`pydantic[email]==2.14.3`: see scripts/lock).
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9_,.-]+\])?==([^\s\\;]+)")


def normalise(name: str) -> str:
    """PEP 503: runs of -, _ and . are one -, case folded."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> list[Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)
    lines = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["dev"],
        *project["build-system"]["requires"],
    ]
    return [Requirement(line) for line in lines]


def locked() -> dict[str, tuple[Version, int]]:
    """name -> (pinned version, number of hashes) from the lock's requirement entries."""
    pins: dict[str, tuple[Version, int]] = {}
    current: str | None = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = normalise(match.group(1))
            assert current not in pins, f"{current} pinned twice"
            pins[current] = (Version(match.group(2)), 0)
        elif current is not None and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line and not line.startswith(" "):
            current = None
    return pins


def test_normalise_follows_pep_503() -> None:
    assert normalise("Foo.Bar__baz-") == "foo-bar-baz-"
    assert normalise("PyJWT") == normalise("pyjwt")
    assert normalise("argon2_cffi") == normalise("argon2-cffi") == normalise("Argon2.CFFI")


def test_every_declared_dependency_is_locked_within_its_bound() -> None:
    pins = locked()
    requirements = declared()
    assert requirements
    for requirement in requirements:
        name = normalise(requirement.name)
        assert name in pins, f"{requirement} is not in requirements.lock: run scripts/lock"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, pyproject.toml wants {requirement}:"
            " run scripts/lock"
        )


def test_extras_of_declared_dependencies_are_locked_too() -> None:
    # pydantic[email] needs email-validator: a lock from a resolver that dropped extras
    # would install a pydantic that refuses EmailStr at import time.
    assert "email-validator" in locked()


def test_every_pin_is_exact_and_hashed() -> None:
    pins = locked()
    assert len(pins) >= len(declared())
    unhashed = sorted(name for name, (_, hashes) in pins.items() if hashes == 0)
    assert unhashed == []
    text = (ROOT / "requirements.lock").read_text()
    entries = [line for line in text.splitlines() if line and not line[0].isspace()]
    loose = [line for line in entries if not line.startswith("#") and "==" not in line]
    assert loose == []


def test_bootstrap_installs_from_the_lock_and_watches_it() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert "--require-hashes -r requirements.lock" in bootstrap
    stamp_line = next(line for line in bootstrap.splitlines() if line.startswith("want="))
    assert "pyproject.toml" in stamp_line and "requirements.lock" in stamp_line
