// Bytes in memory as a RandomAccessInput: what an image opened from a buffer (open_nifti_bytes)
// is read from, by the same readers and gzip engines as a file.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/file.hpp"

namespace voxpipe::core {

class MemoryInput final : public RandomAccessInput {
 public:
  // `owner` keeps `bytes` valid, and the caller keeps them unchanged, for as long as the input
  // lives (null when they outlive it anyway). `name` stands for the bytes in error messages.
  MemoryInput(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, std::string name)
      : bytes_(bytes), owner_(std::move(owner)), name_(std::move(name)) {}

  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    if (offset >= bytes_.size()) return 0;
    const std::size_t n = std::min<std::size_t>(dst.size(), bytes_.size() - static_cast<std::size_t>(offset));
    if (n > 0) std::memcpy(dst.data(), bytes_.data() + offset, n);
    return n;
  }
  std::uint64_t size() const noexcept override { return bytes_.size(); }
  const std::string& path() const noexcept override { return name_; }

 private:
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> owner_;
  std::string name_;
};

}  // namespace voxpipe::core
