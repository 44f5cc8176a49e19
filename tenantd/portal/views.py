"""`POST /api/v1/accounts/{id}/admin-portal-links`: the owner's link for the customer's IT."""

from __future__ import annotations

from aiohttp import web

from tenantd.identity.account_call import in_account_of
from tenantd.portal import service
from tenantd.portal.domain import portal_of
from tenantd.portal.schemas import PortalLinkCreate, PortalLinkOut
from tenantd.web.spec import Routes

ROUTES = Routes("portal")


@ROUTES.post(
    "/api/v1/accounts/{id}/admin-portal-links",
    status=201,
    responses={403: "FORBIDDEN: only the owner creates portal links (portal:create)"},
    summary="A single-use admin portal link (owner): the customer's IT configures SSO or SCIM",
)
async def create_portal_link(request: web.Request, body: PortalLinkCreate) -> PortalLinkOut:
    link = await in_account_of(portal_of(request.app), request, service.create_link, body.intent)
    return PortalLinkOut(url=link.url, intent=link.intent, expires_at=link.expires_at)
