// gzip output layouts: how voxpipe writes .nii.gz.
#pragma once

namespace voxpipe {

enum class GzipLayout {
  // Independent members of 1 MiB, each announcing its compressed and uncompressed size in an
  // RFC 1952 extra field ('VP'): any gzip reader reads the file; voxpipe reads it in parallel
  // and at random without an index. The default.
  members,
  // BGZF (SAMv1 section 4.1): 64 KiB blocks with 'BC' sizes and an end marker, as htslib's
  // bgzip writes; voxpipe reads these in parallel too.
  bgzf,
  // One member, byte-identical to what Python's gzip module (and so nibabel) writes at the same
  // level. Read sequentially unless an index is built for it.
  single,
};

}  // namespace voxpipe
