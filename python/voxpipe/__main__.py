"""``python -m voxpipe ARGS...``: the voxpipe command line run in this Python process, where
objects named by URLs (s3://, gs://, az://, http(s)://) are read through obstore, configured by
the environment (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, credential files, ...), and NIfTI-Zarr stores
(``*.zarr``) through the ``zarr`` package.

``main()`` is also what the ``voxpipe`` command runs when an argument is a URL or a store (pip's
command, cli/python_launcher.py, and the program of a C++ build, cli/main.cpp); neither starts
Python with ``-m``, which puts the current folder first on ``sys.path``. ``python -m voxpipe``
typed in a shell does, as ``-m`` always does."""

import os
import sys

from ._foundation.native import core as _core
from ._integrations import core_hooks


def main() -> int:
    core_hooks.install()
    # bench-load's nibabel child: this interpreter, which has the packages voxpipe was installed
    # with, rather than a python found beside the executable or on PATH.
    if sys.executable:
        os.environ.setdefault("VOXPIPE_PYTHON", sys.executable)
    # The command that runs this voxpipe again, for `voxpipe dcm2niix --make-shim`: the pip
    # launcher set it when it runs this; under `python -m voxpipe`, the launcher installed with
    # this Python's voxpipe (none: the shim cannot be made, and the command says so).
    if os.path.basename(sys.argv[0]) == "__main__.py":
        launcher = os.path.join(os.path.dirname(sys.executable or "/"), "voxpipe")
        if sys.executable and os.path.isfile(launcher):
            os.environ["VOXPIPE_SELF"] = launcher
        else:
            os.environ.pop("VOXPIPE_SELF", None)
    _core.cli_install_signal_handlers()
    return int(_core.cli_main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
