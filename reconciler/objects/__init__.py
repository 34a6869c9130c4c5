"""Reading cluster objects without a client: cutting them down to what Troupe reads as they
enter the cache (``retain``) and decoding snapshots and lists (``snapshot_io``)."""
