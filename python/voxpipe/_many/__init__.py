"""Many and lazy: what works over many images or defers reading: iter_load, load_many and
load_batch (``loading``), resampling of series (``resample_series``), Dask arrays and parallel
conversion (``dask``). Builds on images and formats; nothing below imports it."""
