"""Integrations: the viewer, MONAI metadata, and the handlers the C++ core calls back into
(``core_hooks``: URLs and Zarr stores for the CLI). With the public modules ``voxpipe.torch``,
``voxpipe.monai``, ``voxpipe.torchio``, ``voxpipe.demo`` and ``voxpipe.__main__``, the top layer."""
