"""paralog from Python: `paralog.objects` (array objects, docs/objects.md)."""
