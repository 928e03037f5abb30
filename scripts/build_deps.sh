#!/usr/bin/env bash
# Builds the native libraries voxpipe links (ISA-L, libdeflate, zlib, libjpeg-turbo, CharLS,
# OpenJPEG, libpng, zstd, lz4, c-blosc) as static, position-independent archives for glibc 2.28
# (manylinux_2_28, RHEL 8), from Debian's source packages, with zig's clang as the C/C++
# compiler: `zig cc -target x86_64-linux-gnu.2.28` links against glibc 2.28's symbol versions
# whatever glibc this machine has, and `zig c++` links its own libc++ statically, so nothing in
# the extension asks for a newer glibc or libstdc++ than RHEL 8 has.
#   build/deps/src/       the source packages as Debian's mirror serves them (apt-get source,
#                         checked against the signed Sources index; kept between runs)
#   build/deps/prefix/    include/, lib/*.a, lib/pkgconfig/*.pc (Libs.private folded into Libs:
#                         only static archives are here), share/licenses/<library>/
#   build/deps/bin/       zcc, zc++: the compilers (wrappers around the ziglang package's zig)
#   build/deps/toolchain.cmake   for voxpipe's own build (scripts/build_wheel.sh, setup.sh)
# Why from source: Debian's own static archives are built against glibc 2.36 (stat and fstat
# became real symbols in 2.33, pthread moved into libc in 2.34), and the manylinux images that
# carry older ones are not reachable here; zig brings glibc 2.28's stubs and headers itself.
# A second run rebuilds nothing when build/deps/prefix/.stamp matches this script and the
# compiler; delete build/deps to start over.
# Needs: .venv with the ziglang package (requirements-dev.txt), nasm (ISA-L's and libjpeg-turbo's
# SIMD), cmake, make, xz, and a Debian mirror with deb-src (the machine's deb.debian.org).
# Environment: JOBS (default 2), DEPS_DIR (default build/deps).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
root=$(pwd)
JOBS=${JOBS:-2}
DEPS_DIR=${DEPS_DIR:-build/deps}
mkdir -p "$DEPS_DIR"
DEPS_DIR=$(cd "$DEPS_DIR" && pwd)
prefix=$DEPS_DIR/prefix
GLIBC=2.28
TARGET=x86_64-linux-gnu.$GLIBC
# The source packages come from these Debian suites: of each, the oldest version they carry whose
# original tarball the mirror serves (bookworm's first: the versions of this machine's -dev
# packages, which the C++ test stages link; trixie's where the mirror lacks bookworm's tarball).
suites=(bookworm trixie)

zig=$(.venv/bin/python -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null) ||
  { echo "build_deps.sh: the ziglang package is missing from .venv (pip install -r requirements-dev.txt)" >&2; exit 1; }
[ -x "$zig" ] || { echo "build_deps.sh: $zig is not executable" >&2; exit 1; }
command -v nasm >/dev/null || { echo "build_deps.sh: nasm not found (Debian: apt-get install nasm)" >&2; exit 1; }
zig_version=$("$zig" version)

stamp="script=$(sha256sum "$0" | cut -c1-16) zig=$zig_version glibc=$GLIBC"
if [ -f "$prefix/.stamp" ] && [ "$(head -1 "$prefix/.stamp")" = "$stamp" ]; then
  echo "build_deps.sh: $prefix is current ($stamp)"
  exit 0
fi

# ---- the compilers --------------------------------------------------------------------------
# zig keeps what it compiles (glibc's stubs, libc++) in its cache: one per deps folder, so that
# the wheel build and the libraries use the same.
mkdir -p "$DEPS_DIR/bin" "$DEPS_DIR/zig-cache"
for lang in cc c++; do
  name=zcc
  [ "$lang" = c++ ] && name=zc++
  cat > "$DEPS_DIR/bin/$name" <<EOF
#!/bin/sh
# zig $lang for $TARGET (scripts/build_deps.sh)
ZIG_GLOBAL_CACHE_DIR=\${ZIG_GLOBAL_CACHE_DIR:-$DEPS_DIR/zig-cache} exec "$zig" $lang -target $TARGET "\$@"
EOF
  chmod +x "$DEPS_DIR/bin/$name"
done
for tool in ar ranlib; do
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$tool" > "$DEPS_DIR/bin/z$tool"
  chmod +x "$DEPS_DIR/bin/z$tool"
done
CC=$DEPS_DIR/bin/zcc
CXX=$DEPS_DIR/bin/zc++
AR=$DEPS_DIR/bin/zar
RANLIB=$DEPS_DIR/bin/zranlib
# -O2 everywhere: zig cc without an -O builds in debug mode with UBSan traps.
CFLAGS="-O2 -fPIC -fvisibility=hidden"

cat > "$DEPS_DIR/toolchain.cmake" <<EOF
# voxpipe's manylinux_2_28 build (scripts/build_deps.sh): zig's clang for $TARGET, and the
# static libraries of $prefix only (pkg-config looks nowhere else).
set(CMAKE_C_COMPILER "$CC")
set(CMAKE_CXX_COMPILER "$CXX")
set(CMAKE_AR "$AR")
set(CMAKE_RANLIB "$RANLIB")
set(CMAKE_PREFIX_PATH "$prefix")
set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH FALSE)
set(CMAKE_FIND_LIBRARY_SUFFIXES .a)
set(ENV{PKG_CONFIG_LIBDIR} "$prefix/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(VOXPIPE_MANYLINUX_GLIBC "$GLIBC")
# Every codec is in the wheel: a library missing from the prefix stops the configure.
set(VOXPIPE_USE_ISAL ON CACHE BOOL "")
set(VOXPIPE_WITH_LIBJPEG ON CACHE STRING "")
set(VOXPIPE_WITH_CHARLS ON CACHE STRING "")
set(VOXPIPE_WITH_OPENJPEG ON CACHE STRING "")
EOF
"$CC" --version | head -1

cmake_lib() {  # SOURCE_DIR BUILD_DIR [cmake args...]
  local src=$1 build=$2
  shift 2
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CFLAGS" \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=FALSE -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    "$@" >"$build.configure.log" 2>&1 || { tail -30 "$build.configure.log"; return 1; }
  cmake --build "$build" -j "$JOBS" >"$build.build.log" 2>&1 || { tail -40 "$build.build.log"; return 1; }
  cmake --install "$build" >/dev/null
}

# ---- the sources ----------------------------------------------------------------------------
apt_dir=$DEPS_DIR/apt
src_dir=$DEPS_DIR/src
mkdir -p "$apt_dir/lists/partial" "$src_dir"
: > "$apt_dir/sources.list"
for s in "${suites[@]}"; do
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $s main" >> "$apt_dir/sources.list"
done
apt_opts=(-o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$apt_dir/lists"
          -o Dir::Cache="$apt_dir/cache" -o Debug::NoLocking=1)
[ "$(id -u)" -eq 0 ] && apt_opts+=(-o APT::Sandbox::User=root)
mkdir -p "$apt_dir/cache/archives/partial"
if ! compgen -G "$apt_dir/lists/*Sources*" >/dev/null; then
  apt-get "${apt_opts[@]}" update -qq >"$apt_dir/update.log" 2>&1 ||
    { cat "$apt_dir/update.log"; echo "build_deps.sh: apt-get update of the source indexes failed" >&2; exit 1; }
fi

# The unpacked source tree of PKG (prints its path), Debian's patches applied (security fixes
# among them): the oldest version whose source package downloads whole (apt-get source checks
# every file against the Sources index, whose Release file is signed; dpkg-source -x checks them
# against the .dsc and applies debian/patches). Where the mirror serves no version whole, the
# oldest original tarball it serves, upstream's sources as they are, with a warning.
fetch_source() {  # PKG
  local pkg=$1 versions v upstream orig dir fallback=
  versions=$(apt-cache "${apt_opts[@]}" showsrc "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | uniq)
  [ -n "$versions" ] || { echo "build_deps.sh: no source package $pkg on the mirror" >&2; return 1; }
  for v in $versions; do
    upstream=${v#*:}
    upstream=${upstream%-*}
    dir=$src_dir/$pkg-${v#*:}
    if [ -d "$dir" ]; then echo "$pkg $v" >> "$DEPS_DIR/versions.txt"; echo "$dir"; return 0; fi
    local dsc=$src_dir/${pkg}_${v#*:}.dsc
    if (cd "$src_dir" && apt-get "${apt_opts[@]}" source --download-only -qq "$pkg=$v" >"$src_dir/$pkg.log" 2>&1) &&
       [ -f "$dsc" ]; then
      rm -rf "$dir.tmp"
      dpkg-source --no-copy -x "$dsc" "$dir.tmp" >>"$src_dir/$pkg.log" 2>&1 ||
        { cat "$src_dir/$pkg.log" >&2; echo "build_deps.sh: dpkg-source -x $dsc failed" >&2; return 1; }
      mv "$dir.tmp" "$dir"
      echo "$pkg $v" >> "$DEPS_DIR/versions.txt"
      echo "$dir"
      return 0
    fi
    orig=$(compgen -G "$src_dir/${pkg}_${upstream}.orig.tar.*" | grep -v '\.asc$' | head -1 || true)
    [ -n "$fallback" ] || [ -z "$orig" ] || fallback="$orig $upstream"
  done
  [ -n "$fallback" ] || {
    echo "build_deps.sh: the mirror serves no source of $pkg (tried: $(echo $versions))" >&2
    cat "$src_dir/$pkg.log" >&2 || true
    return 1
  }
  set -- $fallback
  dir=$src_dir/$pkg-$2.orig
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir.tmp"
    tar -xf "$1" -C "$dir.tmp" --strip-components=1
    mv "$dir.tmp" "$dir"
  fi
  echo "build_deps.sh: warning: no whole source package of $pkg on the mirror; building upstream $2 without Debian's patches" >&2
  echo "$pkg $2 (upstream tarball, without Debian's patches)" >> "$DEPS_DIR/versions.txt"
  echo "$dir"
}

rm -rf "$prefix" "$DEPS_DIR/work"
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/share/licenses" "$DEPS_DIR/work"
: > "$DEPS_DIR/versions.txt"
work=$DEPS_DIR/work

license() {  # NAME FILE...
  mkdir -p "$prefix/share/licenses/$1"
  local name=$1
  shift
  cp "$@" "$prefix/share/licenses/$name/"
  # Debian's copyright file of the source package ($d, the tree being built), where there is one.
  if [ -f "$d/debian/copyright" ]; then cp "$d/debian/copyright" "$prefix/share/licenses/$name/debian-copyright"; fi
}

start=$SECONDS
# zlib: libpng, c-blosc and voxpipe's own zlib producers link it.
d=$(fetch_source zlib)
# Its configure script (Debian's tarball drops the Windows files zlib's CMakeLists.txt lists).
(cd "$d" && CC="$CC" AR="$AR" RANLIB="$RANLIB" CFLAGS="$CFLAGS" ./configure --static --prefix="$prefix" &&
   make -j "$JOBS" libz.a && make install) >"$work/zlib.build.log" 2>&1 || { tail -40 "$work/zlib.build.log"; exit 1; }
sed -n '/^  Copyright (C)/,/^  madler@alumni/p' "$d/zlib.h" > "$work/zlib.LICENSE"
[ -s "$work/zlib.LICENSE" ] || { echo "build_deps.sh: zlib's license text not found in zlib.h" >&2; exit 1; }
license zlib "$work/zlib.LICENSE"
echo "zlib: $((SECONDS - start)) s"

d=$(fetch_source libdeflate)
if [ -f "$d/CMakeLists.txt" ]; then
  cmake_lib "$d" "$work/libdeflate" -DLIBDEFLATE_BUILD_SHARED_LIB=OFF -DLIBDEFLATE_BUILD_GZIP=OFF
else  # before 1.15: a Makefile
  make -C "$d" -j "$JOBS" CC="$CC" AR="$AR" CFLAGS="$CFLAGS" libdeflate.a >"$work/libdeflate.build.log" 2>&1 ||
    { tail -40 "$work/libdeflate.build.log"; exit 1; }
  cp "$d/libdeflate.a" "$prefix/lib/"
  cp "$d/libdeflate.h" "$prefix/include/"
fi
license libdeflate "$d/COPYING"
echo "libdeflate: $((SECONDS - start)) s"

# ISA-L: its Makefile.unx (the autotools files are not in the tarball in generated form).
d=$(fetch_source libisal)
make -C "$d" -f Makefile.unx -j "$JOBS" arch= CC="$CC" AS=nasm AR="$AR" DEBUG="$CFLAGS" bin/isa-l.a \
  >"$work/isal.build.log" 2>&1 || { tail -40 "$work/isal.build.log"; exit 1; }
cp "$d/bin/isa-l.a" "$prefix/lib/libisal.a"
mkdir -p "$prefix/include/isa-l"
cp "$d"/include/*.h "$prefix/include/isa-l/"
cp "$d/isa-l.h" "$prefix/include/" 2>/dev/null || true
license isa-l "$d/LICENSE"
echo "isa-l: $((SECONDS - start)) s"

d=$(fetch_source libjpeg-turbo)
# (An absolute CMAKE_INSTALL_LIBDIR: libjpeg-turbo resolves a relative one against the working
# folder, not the prefix.)
cmake_lib "$d" "$work/libjpeg-turbo" -DCMAKE_INSTALL_LIBDIR="$prefix/lib" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_TURBOJPEG=OFF \
  -DWITH_JAVA=OFF -DCMAKE_ASM_NASM_COMPILER=nasm -DREQUIRE_SIMD=ON
license libjpeg-turbo "$d/LICENSE.md" "$d/README.ijg"
echo "libjpeg-turbo: $((SECONDS - start)) s"

d=$(fetch_source charls)
cmake_lib "$d" "$work/charls" -DCHARLS_BUILD_TESTS=OFF -DCHARLS_BUILD_SAMPLES=OFF \
  -DCHARLS_BUILD_FUZZ_TEST=OFF -DCHARLS_INSTALL=ON
license charls "$d/LICENSE.md"
echo "charls: $((SECONDS - start)) s"

d=$(fetch_source openjpeg2)
cmake_lib "$d" "$work/openjpeg" -DBUILD_CODEC=OFF -DBUILD_STATIC_LIBS=ON -DBUILD_TESTING=OFF \
  -DBUILD_DOC=OFF -DBUILD_THIRDPARTY=OFF
license openjpeg "$d/LICENSE"
echo "openjpeg: $((SECONDS - start)) s"

d=$(fetch_source libpng1.6)
cmake_lib "$d" "$work/libpng" -DPNG_SHARED=OFF -DPNG_STATIC=ON -DPNG_TESTS=OFF -DPNG_TOOLS=OFF \
  -DPNG_EXECUTABLES=OFF -DZLIB_ROOT="$prefix"
license libpng "$d/LICENSE"
echo "libpng: $((SECONDS - start)) s"

d=$(fetch_source libzstd)
make -C "$d/lib" -j "$JOBS" CC="$CC" AR="$AR" CFLAGS="$CFLAGS" libzstd.a-mt \
  >"$work/zstd.build.log" 2>&1 || { tail -40 "$work/zstd.build.log"; exit 1; }
cp "$d/lib/libzstd.a" "$prefix/lib/"
cp "$d/lib/zstd.h" "$d/lib/zstd_errors.h" "$d/lib/zdict.h" "$prefix/include/"
zstd_version=$(sed -n 's/^#define ZSTD_VERSION_\(MAJOR\|MINOR\|RELEASE\) *\([0-9]*\).*/\2/p' "$d/lib/zstd.h" | paste -sd.)
license zstd "$d/LICENSE"
echo "zstd: $((SECONDS - start)) s"

d=$(fetch_source lz4)
make -C "$d/lib" -j "$JOBS" CC="$CC" AR="$AR" CFLAGS="$CFLAGS" liblz4.a \
  >"$work/lz4.build.log" 2>&1 || { tail -40 "$work/lz4.build.log"; exit 1; }
cp "$d/lib/liblz4.a" "$prefix/lib/"
cp "$d/lib/lz4.h" "$d/lib/lz4hc.h" "$d/lib/lz4frame.h" "$prefix/include/"
license lz4 "$d/lib/LICENSE"
echo "lz4: $((SECONDS - start)) s"

# c-blosc with the codecs numcodecs' Blosc has (blosclz, lz4, lz4hc, zlib, zstd); Debian's
# tarball drops the bundled copies, so it links the ones above.
d=$(fetch_source c-blosc)
cmake_lib "$d" "$work/c-blosc" -DBUILD_SHARED=OFF -DBUILD_STATIC=ON -DBUILD_TESTS=OFF \
  -DBUILD_BENCHMARKS=OFF -DBUILD_FUZZERS=OFF -DDEACTIVATE_SNAPPY=ON -DPREFER_EXTERNAL_LZ4=ON \
  -DPREFER_EXTERNAL_ZLIB=ON -DPREFER_EXTERNAL_ZSTD=ON -DLZ4_INCLUDE_DIR="$prefix/include" \
  -DLZ4_LIBRARY="$prefix/lib/liblz4.a" -DZSTD_INCLUDE_DIR="$prefix/include" \
  -DZSTD_LIBRARY="$prefix/lib/libzstd.a" -DZLIB_ROOT="$prefix"
license c-blosc "$d"/LICENSES/*.txt
# Its blosc.pc names none of the codec libraries it was built with.
sed -i 's|^Libs: \(.*\)|Libs: \1 -llz4 -lzstd -lz -pthread|' "$prefix/lib/pkgconfig/blosc.pc"
echo "c-blosc: $((SECONDS - start)) s"

# pkg-config files for the libraries built with their Makefiles, and every Libs.private folded
# into Libs: a static archive needs what its library links.
cat > "$prefix/lib/pkgconfig/libzstd.pc" <<EOF
prefix=$prefix
Name: zstd
Description: fast lossless compression algorithm library
Version: $zstd_version
Libs: -L\${prefix}/lib -lzstd -pthread
Cflags: -I\${prefix}/include
EOF
cat > "$prefix/lib/pkgconfig/liblz4.pc" <<EOF
prefix=$prefix
Name: lz4
Description: extremely fast compression algorithm library
Version: 0
Libs: -L\${prefix}/lib -llz4
Cflags: -I\${prefix}/include
EOF
for pc in "$prefix"/lib/pkgconfig/*.pc "$prefix"/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  private=$(sed -n 's/^Libs\.private: *//p' "$pc" | tr '\n' ' ')
  requires=$(sed -n 's/^Requires\.private: *//p' "$pc" | tr '\n' ' ')
  sed -i -e '/^Libs\.private:/d' -e '/^Requires\.private:/d' "$pc"
  [ -z "$private" ] || sed -i "s|^Libs: \(.*\)|Libs: \1 $private|" "$pc"
  [ -z "$requires" ] || { grep -q '^Requires:' "$pc" && sed -i "s|^Requires: \(.*\)|Requires: \1, $requires|" "$pc" || echo "Requires: $requires" >> "$pc"; }
done
[ -d "$prefix/share/pkgconfig" ] && mv "$prefix"/share/pkgconfig/*.pc "$prefix/lib/pkgconfig/" 2>/dev/null || true
# Only static archives: a shared library here would be linked in place of its archive.
find "$prefix/lib" -name '*.so*' -delete
for a in libz libdeflate libisal libjpeg libcharls libopenjp2 libpng16 libzstd liblz4 libblosc; do
  [ -f "$prefix/lib/$a.a" ] || { echo "build_deps.sh: $prefix/lib/$a.a was not built" >&2; exit 1; }
done
cp "$DEPS_DIR/versions.txt" "$prefix/share/licenses/VERSIONS"
{ echo "$stamp"; cat "$DEPS_DIR/versions.txt"; } > "$prefix/.stamp"
echo "build_deps.sh: built $(wc -l < "$DEPS_DIR/versions.txt") libraries into $prefix in $((SECONDS - start)) s"
