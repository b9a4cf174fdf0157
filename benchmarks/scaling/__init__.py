"""The scaling suite: per-rank memory of data parallelism against sharding."""
