"""The transactional outbox: application events written in the transaction of the change they
describe, read back in commit order (the events API, webhook deliveries). Names no domain."""
