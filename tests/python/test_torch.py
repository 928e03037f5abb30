"""voxpipe.torch: VolumeDataset and collate in a torch DataLoader, in the main process and in
forked workers, equal to nibabel's arrays, with batches decoded into one tensor."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import voxpipe as vp  # noqa: E402
import voxpipe.torch as vpt  # noqa: E402


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch")
    rng = np.random.default_rng(5)
    out = []
    for k in range(10):
        data = rng.integers(-500, 500, size=(19, 13, 7), dtype=np.int16)
        img = nib.Nifti1Image(data, np.eye(4))
        if k % 2:
            img.header.set_slope_inter(0.25 * k, 1.0)
        p = str(d / (f"v{k}.nii.gz" if k % 3 else f"v{k}.nii"))
        nib.save(img, p)
        out.append(p)
    return out


def ref(path, dtype=np.float32):
    img = nib.load(path)
    return img.get_fdata(dtype=dtype) if dtype is not None else np.asanyarray(img.dataobj)


def test_items_equal_nibabel(paths):
    ds = vpt.VolumeDataset(paths)
    assert len(ds) == len(paths)
    for i, p in enumerate(paths):
        t = ds[i]
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        np.testing.assert_array_equal(t.numpy(), ref(p))
    native = vpt.VolumeDataset(paths, dtype=None)
    np.testing.assert_array_equal(native[0].numpy(), ref(paths[0], None))


def test_labels_channel_dim_and_transform(paths):
    labels = list(range(100, 100 + len(paths)))
    ds = vpt.VolumeDataset(paths, labels=labels, channel_dim=True,
                           transform=lambda t: t * 2)
    vol, label = ds[3]
    assert label == 103
    assert vol.shape == (1,) + nib.load(paths[3]).shape
    np.testing.assert_array_equal(vol[0].numpy(), ref(paths[3]) * 2)
    with pytest.raises(ValueError, match="labels"):
        vpt.VolumeDataset(paths, labels=[1])


def test_batch_is_decoded_into_one_tensor_without_copies(paths):
    ds = vpt.VolumeDataset(paths, labels=list(range(len(paths))))
    got = ds.__getitems__([4, 1, 7])
    assert isinstance(got, vpt.VolumeBatch)
    volumes, labels = vpt.collate(got)
    assert volumes is got.volumes  # collate passes the batch tensor through: no stacking
    assert volumes.shape == (3,) + nib.load(paths[0]).shape
    # Each sample is a view of the batch tensor.
    assert got[0][0].data_ptr() == volumes[0].data_ptr()
    for k, i in enumerate([4, 1, 7]):
        np.testing.assert_array_equal(volumes[k].numpy(), ref(paths[i]))
    assert labels.tolist() == [4, 1, 7]


@pytest.mark.parametrize("collate_fn", [None, vpt.collate], ids=["default_collate", "vp_collate"])
def test_dataloader_main_process(paths, collate_fn):
    ds = vpt.VolumeDataset(paths, labels=list(range(len(paths))))
    kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
    loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=0, **kwargs)
    seen = 0
    for volumes, labels in loader:
        for k, i in enumerate(labels.tolist()):
            np.testing.assert_array_equal(volumes[k].numpy(), ref(paths[i]))
            seen += 1
    assert seen == len(paths)


def test_dataloader_forked_workers_after_the_parent_used_the_pool(paths):
    """The parent decodes on several threads first (the worker pool is running), then the
    DataLoader forks its workers, each decoding with voxpipe's own threads."""
    vp.load_many(paths, threads=2)
    ds = vpt.VolumeDataset(paths, labels=list(range(len(paths))), threads=2)
    loader = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=vpt.collate,
                        multiprocessing_context="fork", timeout=120)
    got = {}
    for volumes, labels in loader:
        for k, i in enumerate(labels.tolist()):
            got[i] = volumes[k].numpy().copy()
    assert sorted(got) == list(range(len(paths)))
    for i, p in enumerate(paths):
        np.testing.assert_array_equal(got[i], ref(p))


def test_mixed_shapes_collate_to_a_list(paths, tmp_path):
    other = str(tmp_path / "other.nii")
    nib.save(nib.Nifti1Image(np.ones((4, 5, 6), np.int16), np.eye(4)), other)
    ds = vpt.VolumeDataset([paths[0], other])
    batch = vpt.collate(ds.__getitems__([0, 1]))
    assert isinstance(batch, list) and len(batch) == 2
    np.testing.assert_array_equal(batch[1].numpy(), np.ones((4, 5, 6), np.float32))
