"""paralog from Python: `paralog.stream`, shared event streams (docs/streams.md)."""
