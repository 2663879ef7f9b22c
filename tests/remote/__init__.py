"""Remote tests: S3 against MinIO, the versioned object layout."""
