"""Moving users in and out of tenantd (`tenantd users import`, `tenantd users export`)."""
