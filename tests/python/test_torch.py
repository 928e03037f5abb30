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


def _collate_noting_shared_memory(samples):
    volumes, labels = vpt.collate(samples)
    return volumes, labels, torch.tensor(volumes.is_shared())


def test_dataloader_workers_decode_into_shared_memory(paths):
    """In a worker the batch is decoded into shared memory, as PyTorch's own collate allocates
    it there: it is sent to the main process as a handle instead of being copied into shared
    memory on the way."""
    ds = vpt.VolumeDataset(paths, labels=list(range(len(paths))))
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=_collate_noting_shared_memory,
                        multiprocessing_context="fork", timeout=120)
    seen = 0
    for volumes, labels, shared in loader:
        assert bool(shared)
        for k, i in enumerate(labels.tolist()):
            np.testing.assert_array_equal(volumes[k].numpy(), ref(paths[i]))
            assert volumes[k].numpy().flags.f_contiguous
            seen += 1
    assert seen == len(paths)
    # In the main process the batch is an ordinary array (no shared memory).
    main = ds.__getitems__([0, 1])
    assert not main.volumes.is_shared()


def test_mixed_shapes_collate_to_a_list(paths, tmp_path):
    other = str(tmp_path / "other.nii")
    nib.save(nib.Nifti1Image(np.ones((4, 5, 6), np.int16), np.eye(4)), other)
    ds = vpt.VolumeDataset([paths[0], other])
    batch = vpt.collate(ds.__getitems__([0, 1]))
    assert isinstance(batch, list) and len(batch) == 2
    np.testing.assert_array_equal(batch[1].numpy(), np.ones((4, 5, 6), np.float32))


# --- meta=True: MONAI-style metadata with every item -------------------------------------------

@pytest.fixture(scope="module")
def meta_paths(tmp_path_factory):
    """Six volumes of one shape with different affines, scalings and containers."""
    d = tmp_path_factory.mktemp("torch_meta")
    rng = np.random.default_rng(6)
    out = []
    for k in range(6):
        aff = np.diag([0.9 + 0.1 * k, 1.1, 2.0, 1.0])
        aff[:3, 3] = [-10.0 * k, 3.5, 7.25]
        img = nib.Nifti1Image(rng.integers(-500, 500, size=(11, 9, 5), dtype=np.int16), aff)
        if k % 2:
            img.header.set_slope_inter(0.5 * k, -2.0)
        p = str(d / (f"m{k}.nii.gz" if k % 3 else f"m{k}.nii"))
        nib.save(img, p)
        out.append(p)
    return out


def test_meta_items_equal_monai_nibabel_reader(meta_paths):
    """Each item's dict is what MONAI's NibabelReader returns for the file, plus LoadImage's
    filename_or_obj; the volume is unchanged by meta=True."""
    pytest.importorskip("monai")
    from monai.data import NibabelReader

    from framework_testlib import assert_same

    ds = vpt.VolumeDataset(meta_paths, labels=list(range(len(meta_paths))), meta=True)
    for i, p in enumerate(meta_paths):
        volume, label, meta = ds[i]
        assert label == i
        assert_same(volume, vpt.VolumeDataset(meta_paths)[i], "volume")
        reader = NibabelReader()
        want = reader.get_data(reader.read(p))[1]
        want["filename_or_obj"] = p
        assert_same(meta, want, p)


@pytest.mark.parametrize("collate_fn", [None, vpt.collate], ids=["default_collate", "vp_collate"])
def test_meta_through_collate(meta_paths, collate_fn):
    from torch.utils.data._utils.collate import default_collate

    from framework_testlib import assert_same

    ds = vpt.VolumeDataset(meta_paths, labels=list(range(len(meta_paths))), meta=True)
    kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
    seen = []
    for volumes, labels, meta in DataLoader(ds, batch_size=3, **kwargs):
        idx = labels.tolist()
        seen += idx
        assert meta["filename_or_obj"] == [meta_paths[i] for i in idx]
        want_affines = np.stack([nib.load(meta_paths[i]).affine for i in idx])
        assert_same(meta["affine"], torch.from_numpy(want_affines), "affine")
        assert_same(meta["spatial_shape"], torch.tensor([[11, 9, 5]] * 3, dtype=torch.int16),
                    "spatial_shape")  # the header's dim, int16
        # The batch path (one decode into the batch tensor) gives what the items give.
        assert_same(meta, default_collate([ds[i][2] for i in idx]), "meta")
        for k, i in enumerate(idx):
            np.testing.assert_array_equal(volumes[k].numpy(), ref(meta_paths[i]))
    assert seen == list(range(len(meta_paths)))


def test_meta_without_labels_and_with_mixed_shapes(meta_paths, tmp_path):
    ds = vpt.VolumeDataset(meta_paths[:2], meta=True, channel_dim=True)
    volume, meta = ds[1]
    assert volume.shape == (1, 11, 9, 5) and meta["filename_or_obj"] == meta_paths[1]
    volumes, batch_meta = vpt.collate(ds.__getitems__([0, 1]))
    assert volumes.shape == (2, 1, 11, 9, 5)
    assert batch_meta["filename_or_obj"] == meta_paths[:2]
    other = str(tmp_path / "other.nii")
    nib.save(nib.Nifti1Image(np.ones((4, 5, 6), np.int16), np.eye(4)), other)
    mixed = vpt.VolumeDataset([meta_paths[0], other], labels=[7, 8], meta=True)
    volumes, labels, batch_meta = vpt.collate(mixed.__getitems__([0, 1]))
    assert isinstance(volumes, list) and volumes[1].shape == (4, 5, 6)
    assert labels.tolist() == [7, 8]
    assert batch_meta["spatial_shape"].tolist() == [[11, 9, 5], [4, 5, 6]]
    np.testing.assert_array_equal(batch_meta["affine"][1].numpy(), np.eye(4))
