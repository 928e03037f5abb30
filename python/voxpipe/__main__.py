"""``python -m voxpipe ARGS...``: the voxpipe command line run in this Python process, where
objects named by URLs (s3://, gs://, az://, http(s)://) are read through obstore, configured by
the environment (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, credential files, ...), and NIfTI-Zarr stores
(``*.zarr``) through the ``zarr`` package. The ``voxpipe`` program runs this when given a URL or a
store."""

import sys

from . import _core, _remote  # noqa: F401  (_remote installs the core's URL handlers)


def main() -> int:
    _core.cli_install_signal_handlers()
    return int(_core.cli_main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
