"""Formats: NIfTI-1/2 (the C++ core), NIfTI-Zarr and DICOM. Each turns a source (a path, bytes, a
stream, an object in a store) into a nibabel image with a lazy proxy, and writes; each registers
itself in ``registry``, which ``vp.load`` and ``vp.save`` consult. Formats import foundation and
sources only (NIfTI-Zarr builds on NIfTI's proxy and header assembly), never the layers above."""
