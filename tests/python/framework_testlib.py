"""What the MONAI, TorchIO and torch-dataset tests share: NIfTI cases written with nibabel, and an
exact comparison of nested results (dicts, tuples, arrays, tensors)."""

from __future__ import annotations

import math

import nibabel as nib
import numpy as np


def oblique_affine():
    a = 0.3
    rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    aff = np.eye(4)
    aff[:3, :3] = rot @ np.diag([0.9, 1.1, 1.3])
    aff[:3, 3] = [-10, 5, 7.25]
    return aff


def diagonal_affine():
    aff = np.diag([-1.0, 1.0, 2.5, 1.0])
    aff[:3, 3] = [90, -126, -72]
    return aff


def permuted_affine():
    """Voxel axes (i, j, k) along (S, -R, A): as_closest_canonical transposes and flips them."""
    return np.array([[0, -1.0, 0, 10], [0, 0, 2.0, -5], [1.5, 0, 0, 3], [0, 0, 0, 1]])


def write_nifti(path, data, affine, slope_inter=None, endianness=None):
    """`data` as nibabel saves it, stored in data's dtype (scale factors set on the header)."""
    hdr = nib.Nifti1Header(endianness=endianness) if endianness else None
    img = nib.Nifti1Image(data, affine, hdr, dtype=data.dtype)
    if slope_inter is not None:
        img.header.set_slope_inter(*slope_inter)
    nib.save(img, str(path))
    return str(path)


def assert_same(got, want, where="result"):
    """Equal types (str and its enums alike), keys, shapes, dtypes and values, bit for bit; NaN
    equals NaN."""
    import torch

    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {type(got)} is not a dict"
        assert got.keys() == want.keys(), f"{where}: keys differ: {set(got) ^ set(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got)} is not a tensor"
        assert_same(got.numpy(), want.numpy(), where)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got)} is not an array"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
        nan = want.dtype.kind in "fc"
        assert np.array_equal(got, want, equal_nan=nan), f"{where}: values differ"
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), f"{where}: {got!r} is not NaN"
    else:
        assert type(got) is type(want) or isinstance(want, str) and isinstance(got, str), \
            f"{where}: {type(got)} != {type(want)}"
        assert got == want, f"{where}: {got!r} != {want!r}"
