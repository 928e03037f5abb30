"""Sources: where bytes come from. Local files and memory are read by the C++ core itself; objects
in a store (S3, GCS, Azure, HTTP(S), through obstore, or a user's fsspec filesystem) through
``remote``: a RemoteObject fetched whole, or a RemoteFile read by byte ranges, every request
pinned to the version (ETag) first seen, with the seek-index sidecar lookup; ``listing`` lists
prefixes and fetches many objects; ``prefetch`` fetches ahead of the many-file loaders. Knows
nothing of NIfTI, Zarr or DICOM."""
