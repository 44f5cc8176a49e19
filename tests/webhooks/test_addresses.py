"""Every IPv6 form of an IPv4 address is judged as that address: mapped, compatible, NAT64,
6to4 and Teredo forms of the metadata address are refused always, and of loopback and private
addresses when TENANTD_WEBHOOK_REFUSE_PRIVATE is on (at add time, at DNS time, at send time)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from tenantd.app.settings import load_settings
from tenantd.webhooks.addresses import (
    ForbiddenAddress,
    GuardedResolver,
    check_url,
    forbidden_ip,
    refuse_private,
)
from tenantd.webhooks.sender import WebhookSender


def teredo(client: str, server: str = "65.54.227.120") -> str:
    """A Teredo address (RFC 4380): 2001:0000, the server, flags, port and client obfuscated."""
    value = (0x20010000 << 96) | (int(ipaddress.IPv4Address(server)) << 64)
    value |= 0x8000 << 48 | (0xFFFF ^ 0x1234) << 32
    value |= int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF
    return str(ipaddress.IPv6Address(value))


def forms(ipv4: str) -> list[str]:
    """The IPv6 spellings that reach `ipv4` (through a translator, a tunnel or a dual stack)."""
    bits = int(ipaddress.IPv4Address(ipv4))
    hi, lo = bits >> 16, bits & 0xFFFF
    return [
        f"::ffff:{ipv4}",  # IPv4-mapped
        f"::ffff:{hi:x}:{lo:x}",
        f"::{ipv4}",  # IPv4-compatible
        f"64:ff9b::{ipv4}",  # NAT64 (RFC 6052)
        f"64:ff9b::{hi:x}:{lo:x}",
        f"64:ff9b:1::{hi:x}:{lo:x}",  # local-use NAT64 (RFC 8215)
        f"2002:{hi:x}:{lo:x}::1",  # 6to4
        teredo(ipv4),  # Teredo client
        teredo("8.8.8.8", server=ipv4),  # Teredo server
    ]


METADATA = "169.254.169.254"
PRIVATE = ["127.0.0.1", "10.1.2.3"]


def test_the_teredo_helper_speaks_the_real_form() -> None:
    address = ipaddress.IPv6Address(teredo(METADATA))
    assert address.teredo == (
        ipaddress.IPv4Address("65.54.227.120"),
        ipaddress.IPv4Address(METADATA),
    )


@pytest.mark.parametrize("host", [METADATA, *forms(METADATA)])
def test_every_form_of_the_metadata_address_is_refused(host: str) -> None:
    assert forbidden_ip(host)
    with pytest.raises(ForbiddenAddress):
        check_url(f"http://[{host}]/hook" if ":" in host else f"http://{host}/hook")


@pytest.mark.parametrize("host", [h for ip in PRIVATE for h in [ip, *forms(ip)]] + ["::1"])
def test_every_form_of_a_private_address_is_refused_when_private_is_refused(host: str) -> None:
    url = f"http://[{host}]/hook" if ":" in host else f"http://{host}/hook"
    assert check_url(url) == url  # operators may reach internal services by default
    assert forbidden_ip(host, refuse_private=True)
    with pytest.raises(ForbiddenAddress):
        check_url(url, refuse_private=True)


@pytest.mark.parametrize("host", ["8.8.8.8", "2606:4700:4700::1111", *forms("8.8.8.8")[:6]])
def test_public_addresses_in_any_form_pass(host: str) -> None:
    assert not forbidden_ip(host, refuse_private=True)


class Answers:
    """DNS answering with fixed addresses (a name rebound onto an IPv6 form)."""

    def __init__(self, *hosts: str):
        self.hosts = hosts

    async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[dict[str, Any]]:
        return [
            {
                "hostname": host,
                "host": answer,
                "port": port,
                "family": socket.AF_INET6 if ":" in answer else socket.AF_INET,
                "proto": 6,
                "flags": 0,
            }
            for answer in self.hosts
        ]

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("host", forms(METADATA) + forms("127.0.0.1"))
async def test_the_resolver_drops_every_form(host: str) -> None:
    resolver = GuardedResolver(Answers(host), refuse_private=True)  # type: ignore[arg-type]
    with pytest.raises(ForbiddenAddress):
        await resolver.resolve("rebound.example", 443)
    kept = await GuardedResolver(Answers(host, "93.184.215.14"), refuse_private=True).resolve(  # type: ignore[arg-type]
        "rebound.example", 443
    )
    assert [answer["host"] for answer in kept] == ["93.184.215.14"]


async def test_the_sender_refuses_an_ip_literal_in_any_form(env: dict[str, str]) -> None:
    settings = load_settings(environ={**env, "TENANTD_WEBHOOK_REFUSE_PRIVATE": "true"})
    assert refuse_private(settings)
    sender = WebhookSender(settings)
    try:
        for host in [*forms(METADATA), *forms("10.1.2.3")]:
            outcome = await sender.send(
                f"http://[{host}]/hook", "msg_1", "{}", ["whsec_" + "A" * 44]
            )
            assert not outcome.ok and "refused" in (outcome.error or ""), (host, outcome)
    finally:
        await sender.close()
