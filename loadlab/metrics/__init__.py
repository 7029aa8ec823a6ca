"""The definitions of docs/metrics.md, shared by the live client and the analyzer: per-request
formulas, exact statistics and the client self-check's limits. Bottom layer: imports no other part of loadlab."""
