#!/usr/bin/env python3
"""The `voxpipe` command of the Python package (the wheel installs this file as bin/voxpipe; pip
points its first line at the environment's Python): the commands of cli/, linked into
voxpipe._core, run in this process, so that URLs and NIfTI-Zarr stores are read by the same
Python, with the packages installed beside voxpipe, whether the environment is activated or not.

Not a [project.scripts] entry point: those import the package first (voxpipe/__init__.py brings
numpy, nibabel and pydicom: 350 ms), where a local file needs only the extension (20 ms). The
whole package is imported only when an argument may be a URL or a store.

Nothing is imported from the folder the command runs in, nor from the one this file is in:
the latter, which Python puts first on sys.path for a script, is taken off before any import.
"""
import sys

TYPE_CHECKING = False  # typing's, without importing it before main() has cleaned sys.path
if TYPE_CHECKING:
    from types import ModuleType


def may_need_package(args: list[str]) -> bool:
    """Whether an argument may name an object by URL or a Zarr store, which only the package reads
    (the exact rules are voxpipe::is_object_url and voxpipe::is_zarr_path). A superset: a false
    positive costs only the package's import."""
    for a in args:
        name = a.split("?", 1)[0].rstrip("/").lower()
        if "://" in a or name.endswith(".zarr"):
            return True
    return False


def load_core() -> "ModuleType":
    """voxpipe._core, found where the package is installed and loaded without running the
    package's __init__."""
    import importlib.machinery
    import importlib.util
    package = importlib.util.find_spec("voxpipe")  # finds the package without importing it
    spec = None
    if package is not None and package.submodule_search_locations:
        spec = importlib.machinery.PathFinder.find_spec("voxpipe._core",
                                                        package.submodule_search_locations)
    if spec is None or spec.loader is None:
        raise SystemExit("voxpipe: the voxpipe package is not installed in "
                         f"{sys.prefix} (pip install voxpipe)")
    core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(core)
    return core


def main() -> int:
    # Before any import: the folder of this script, first on sys.path, holds no module of ours.
    if not getattr(sys.flags, "safe_path", False):  # -P or PYTHONSAFEPATH (3.11): none added
        del sys.path[0]
    args = sys.argv[1:]
    import os
    # The command that runs this voxpipe again (`voxpipe dcm2niix --make-shim` writes it into
    # the shim it makes): this script, which pip pointed at this environment's Python.
    os.environ["VOXPIPE_SELF"] = os.path.abspath(sys.argv[0])
    if may_need_package(args):
        from voxpipe.__main__ import main as run_with_package
        return run_with_package()
    import signal
    core = load_core()
    if sys.executable:  # bench-load's nibabel child: this Python (voxpipe.__main__ does the same)
        os.environ.setdefault("VOXPIPE_PYTHON", sys.executable)
    # Python ignores SIGPIPE; the command, as any program, ends quietly when its reader does
    # (`voxpipe info *.nii | head`). Only here: the package's network clients expect it ignored.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    core.cli_install_signal_handlers()
    return int(core.cli_main(args))


if __name__ == "__main__":
    sys.exit(main())
