"""A user's script over voxpipe's public API, type-checked (never run) by test_typing.py.

Every voxpipe call's result goes through reveal_type: mypy --strict must accept the script and
reveal no Any that comes from voxpipe.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import reveal_type

import numpy as np

import voxpipe as vp


def main(nii: Path, dicom_dir: Path, xfm: Path, gz: Path) -> None:
    img = reveal_type(vp.load(nii))
    reveal_type(vp.from_bytes(nii.read_bytes()))
    reveal_type(vp.from_stream(io.BytesIO(nii.read_bytes())))
    proxy = img.dataobj
    assert isinstance(proxy, vp.ArrayProxy)
    reveal_type(proxy.read(dtype=np.float32))
    reveal_type(vp.save(img, nii.with_name("copy.nii.gz")))

    with vp.iter_load([nii, nii]) as it:
        for vol in it:
            reveal_type(vol)
    reveal_type(vp.iter_load([nii], images=True))
    reveal_type(vp.load_many([nii]))
    reveal_type(vp.load_many([nii], images=True))
    batch = reveal_type(vp.empty_batch(2, img.shape))
    reveal_type(vp.load_batch([nii, nii], out=batch))
    reveal_type(vp.load_batch([nii], device="cuda"))

    series_img = reveal_type(vp.load_dicom(dicom_dir))
    ds = reveal_type(vp.dicom.read(dicom_dir / "1.dcm"))
    reveal_type(ds.pixel_array)
    reveal_type(ds.get_fdata(np.float32))
    rows: int = ds.Rows  # dynamic attributes, as pydicom's
    found = reveal_type(vp.dicom.scan(dicom_dir))
    reveal_type(found.skipped)
    series = reveal_type(found[0])
    reveal_type(series.shape)
    reveal_type(series.affine)
    reveal_type(series.files)
    reveal_type(series.get_data())
    reveal_type(series.load())

    data = series_img.get_fdata()
    reveal_type(vp.affine_transform(data, np.eye(4)))
    reveal_type(vp.map_coordinates(data, np.zeros((3, 10))))
    reveal_type(vp.resample(nii, nii, np.eye(4)))
    reveal_type(vp.transforms.load_affines(xfm))
    reveal_type(vp.transforms.load_affine(xfm))
    reveal_type(vp.transforms.load_field(nii))
    reveal_type(vp.gz.build_index(gz))

    reveal_type(vp.to_device(img))
    reveal_type(vp.to_device(data, None))
    status = reveal_type(vp.cuda_status())
    reveal_type(status.device_names)
    reveal_type(vp.accelerate_nibabel())
    print(rows)
