"""Data: sources, ingest into chunked Zarr stores, the validated store reader, blocks and in-memory datasets."""
