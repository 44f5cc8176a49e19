"""The webhook job kinds (always durable: a delivery is a promise made to the outside)."""

from tenantd.webhooks.delivery import DELIVER_KIND

JOB_KINDS = (DELIVER_KIND,)
