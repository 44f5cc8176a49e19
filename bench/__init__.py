"""tenantd benchmark suite (scripts/bench). Not part of the test suite."""
