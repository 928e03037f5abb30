"""Foundation: what every layer above uses and which knows no file format and no source: types,
optional imports, the buffer pool, device arrays, header helpers, redaction of secrets, progress
reports, interpolation over arrays, and the identity of files, bytes and this machine (what
pickles check and Dask tokens are made of). Imports only ``voxpipe._core`` and
``voxpipe.errors``."""
