"""DICOM datasets, shaped after pydicom's, and series assembled into volumes.

::

    import voxpipe as vp
    ds = vp.dicom.read("slice.dcm")           # metadata; the pixel data is located, not read
    ds.Rows, ds.PixelSpacing, ds.PatientName  # values converted as pydicom 3 converts them
    elem = ds[0x0028, 0x0010]                 # or ds[0x00280010], ds["Rows"]: a DataElement
    elem.VR, elem.value, elem.value_tell      # "US", 512, byte offset of the value
    ds.pixel_data_offset, ds.pixel_data_length, ds.pixel_data_fragments
    series = vp.dicom.scan("folder/")         # series found under a folder, checked
    series = vp.dicom.scan("s3://bucket/study/", storage_options=opts)  # or under a URL prefix
    volume = series[0].get_data()             # float32, each image's rescale applied
    written = vp.dicom.to_nifti("dicom/", "bids/", filename="%p_%s")  # as dcm2niix writes

Parsing is voxpipe's C++ parser (docs/dicom.md). Tags live in ``_formats.dicom.tags``, datasets
in ``_formats.dicom.dataset``, series in ``_formats.dicom.series`` (which builds on datasets),
the conversion to NIfTI in ``_formats.dicom.bids``;
this module only names them.
"""

from ._formats.dicom.bids import Converted, to_nifti
from ._formats.dicom.dataset import DEFAULT_DEFER_SIZE, DataElement, Dataset, FileDataset, read
from ._formats.dicom.series import ScanResult, Series, load_dicom, scan
from ._formats.dicom.tags import Tag

__all__ = ["DataElement", "Dataset", "FileDataset", "Tag", "read", "DEFAULT_DEFER_SIZE",
           "ScanResult", "Series", "load_dicom", "scan", "Converted", "to_nifti"]
