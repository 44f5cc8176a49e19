"""The kernel's caching mechanism: invalidation announcements (the channel, the staleness
rule), the generic cache with invalidation by key (`keyed`) and the background reloader;
each domain keeps its own caches on them."""
