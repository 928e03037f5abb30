"""Started by every Python process whose PYTHONPATH holds this folder (scripts/nibabel_suite.py
puts it there for the accelerated run): with VOXPIPE_ACCELERATE_NIBABEL=1, nibabel reads NIfTI
through voxpipe from the first line on, in the test process and in the nib-* commands that
nibabel's test_scripts starts as subprocesses alike."""

import os

if os.environ.get("VOXPIPE_ACCELERATE_NIBABEL") == "1":
    import voxpipe

    voxpipe.accelerate_nibabel()
